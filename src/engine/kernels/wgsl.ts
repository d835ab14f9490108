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
