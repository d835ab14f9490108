/**
 * WGSL snippet files hold several alternative pieces (an access width, an exchange path, an entry
 * point) separated by `//--- name` lines; kernels assemble their shader from the sections they need.
 */

/** The text of section `name` of a `//--- name` separated snippet file. */
export function wgslSection(src: string, name: string): string {
  const parts = src.split(/^\/\/--- (\w+)\s*$/m);
  for (let i = 1; i < parts.length; i += 2) if (parts[i] === name) return parts[i + 1];
  throw new Error(`WGSL section '${name}' not found`);
}

/** The text before the first `//--- name` line of a snippet file (what every section shares). */
export function wgslPreamble(src: string): string {
  return src.split(/^\/\/--- \w+\s*$/m)[0];
}

const IF_MARK = /^[ \t]*\/\/ #(if (\w+)|else|endif)[ \t]*$/;

/**
 * `src` with its `// #if FLAG` … [`// #else` …] `// #endif` blocks resolved by `flags`: the kept
 * lines stay as written, the marker lines go. For text variants of one shader that an override
 * cannot express (swiglu's element type) or should not (the GEMM's stream-K blocks: a branch on an
 * override would add dead code to every other tile's pipeline, and the NVIDIA Vulkan driver compiles
 * equal but differently written WGSL differently). Blocks do not nest; a flag not in `flags`, or a
 * block left open, is an error.
 */
export function wgslIf(src: string, flags: Record<string, boolean>): string {
  const out: string[] = [];
  let open: { flag: string; keep: boolean; line: number; sawElse: boolean } | undefined;
  src.split('\n').forEach((line, i) => {
    const m = IF_MARK.exec(line);
    if (!m) {
      if (!open || open.keep) out.push(line);
      return;
    }
    const at = `line ${i + 1}`;
    if (m[2] !== undefined) {
      if (open) throw new Error(`#if: ${at} opens a block inside the one of line ${open.line} (no nesting)`);
      if (!(m[2] in flags)) throw new Error(`#if: ${at}: no value for '${m[2]}'`);
      open = { flag: m[2], keep: flags[m[2]], line: i + 1, sawElse: false };
    } else if (!open) {
      throw new Error(`#if: ${at}: #${m[1]} without #if`);
    } else if (m[1] === 'else') {
      if (open.sawElse) throw new Error(`#if: ${at}: a second #else for line ${open.line}`);
      open.keep = !open.keep;
      open.sawElse = true;
    } else {
      open = undefined;
    }
  });
  if (open) throw new Error(`#if: the block of line ${open.line} (${open.flag}) has no #endif`);
  return out.join('\n');
}

const UNROLL_MARK = /^[ \t]*\/\/ unroll[ \t]*$/;
const UNROLL_HEAD = /^([ \t]*)for \(var (\w+) = 0u; \2 < (\w+); \2\+\+\) \{[ \t]*$/;

/** The text of a line up to its `//` comment (WGSL has no string literals to confuse this). */
const code = (line: string) => line.replace(/\/\/.*$/, '');

/**
 * `src` with every loop marked by a `// unroll` line written out: the marked line must be followed
 * by `for (var i = 0u; i < BOUND; i++) {`, BOUND a literal or a name given in `bounds` (an override's
 * value for this pipeline), and the loop becomes BOUND blocks `{ let i = <j>u; <body> }`. Marked
 * loops nested in a marked loop are written out too. The NVIDIA Vulkan driver keeps constant-bound
 * loops as loops (counter, branch and index arithmetic between the steps; no overlap of one step's
 * loads with the last one's arithmetic), which the GEMM pays for in speed. A body with `break` or
 * `continue` is refused: written out, it would leave the block.
 */
export function unrollLoops(src: string, bounds: Record<string, number>): string {
  const lines = src.split('\n');
  const out: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!UNROLL_MARK.test(lines[i])) {
      out.push(lines[i]);
      continue;
    }
    const head = UNROLL_HEAD.exec(lines[i + 1] ?? '');
    if (!head) throw new Error(`unroll: line ${i + 2} is not 'for (var i = 0u; i < BOUND; i++) {' after the '// unroll' mark`);
    const [, indent, v, boundName] = head;
    const count = /^\d+$/.test(boundName) ? Number(boundName) : bounds[boundName];
    if (count === undefined || !Number.isInteger(count) || count < 0) throw new Error(`unroll: no count for the loop bound '${boundName}' (line ${i + 2})`);
    // The body runs to the brace that closes the loop's own.
    let depth = 1;
    let end = i + 2;
    for (; end < lines.length; end++) {
      for (const ch of code(lines[end])) depth += ch === '{' ? 1 : ch === '}' ? -1 : 0;
      if (depth <= 0) break;
    }
    if (depth !== 0 || code(lines[end] ?? '').trim() !== '}') throw new Error(`unroll: the loop of line ${i + 2} does not end in a '}' line of its own`);
    const body = unrollLoops(lines.slice(i + 2, end).join('\n'), bounds);
    if (/\b(break|continue)\b/.test(body.split('\n').map(code).join('\n'))) throw new Error(`unroll: the loop of line ${i + 2} has break or continue`);
    for (let j = 0; j < count; j++) out.push(`${indent}{`, `${indent}  let ${v} = ${j}u;`, body, `${indent}}`);
    i = end;
  }
  return out.join('\n');
}
