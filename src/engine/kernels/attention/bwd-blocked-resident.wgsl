// The register-blocked backward's resident kernels, attn_bwd_dkdv_blocked and attn_bwd_dq_blocked:
// the own pair stays in ownA / ownB for the workgroup's whole life, the other pair goes through
// othA / othB tile by tile. Appended by attention.ts to attention-bwd-blocked.wgsl (legend,
// bindings, tiles, helpers), whose text it uses; the streamed kernels follow in one shader.

// Element d..d+3 of a head row (D even: a vec4 is full, half, or past the end).
fn putDq(base: u32, d: u32, x: vec4<f32>) {
  if (d < D) { dq[base + d] = x.x; dq[base + d + 1u] = x.y; }
  if (d + 2u < D) { dq[base + d + 2u] = x.z; dq[base + d + 3u] = x.w; }
}
fn putDk(base: u32, d: u32, x: vec4<f32>) {
  if (d < D) { dk[base + d] = x.x; dk[base + d + 1u] = x.y; }
  if (d + 2u < D) { dk[base + d + 2u] = x.z; dk[base + d + 3u] = x.w; }
}
fn putDv(base: u32, d: u32, x: vec4<f32>) {
  if (d < D) { dv[base + d] = x.x; dv[base + d + 1u] = x.y; }
  if (d + 2u < D) { dv[base + d + 2u] = x.z; dv[base + d + 3u] = x.w; }
// #if DV16
  if (d < D) { dv16_store2((base + d) / 2u, x.x, x.y); }
  if (d + 2u < D) { dv16_store2((base + d) / 2u + 1u, x.z, x.w); }
// #endif
}

// Gradient column d4 of keys key0..key0+3 (matrix column i = key key0 + i).
fn putKVColumn(b: u32, g: u32, key0: u32, d4: u32, aK: mat4x4<f32>, aV: mat4x4<f32>) {
  let T = p.T;
  let rowStride = p.nKV * D;
  let base = ((b * T + key0) * p.nKV + g) * D;
  if (key0 < T) { putDk(base, 4u * d4, aK[0] * p.scale); putDv(base, 4u * d4, aV[0]); }
  if (key0 + 1u < T) { putDk(base + rowStride, 4u * d4, aK[1] * p.scale); putDv(base + rowStride, 4u * d4, aV[1]); }
  if (key0 + 2u < T) { putDk(base + 2u * rowStride, 4u * d4, aK[2] * p.scale); putDv(base + 2u * rowStride, 4u * d4, aV[2]); }
  if (key0 + 3u < T) { putDk(base + 3u * rowStride, 4u * d4, aK[3] * p.scale); putDv(base + 3u * rowStride, 4u * d4, aV[3]); }
}

// Gradient column d4 of queries t0..t0+3 of head h (matrix column i = query t0 + i).
fn putQColumn(b: u32, h: u32, t0: u32, d4: u32, a: mat4x4<f32>) {
  let T = p.T;
  let rowStride = p.nH * D;
  let base = ((b * T + t0) * p.nH + h) * D;
  if (t0 < T) { putDq(base, 4u * d4, a[0] * p.scale); }
  if (t0 + 1u < T) { putDq(base + rowStride, 4u * d4, a[1] * p.scale); }
  if (t0 + 2u < T) { putDq(base + 2u * rowStride, 4u * d4, a[2] * p.scale); }
  if (t0 + 3u < T) { putDq(base + 3u * rowStride, 4u * d4, a[3] * p.scale); }
}

@compute @workgroup_size(NT)
fn attn_bwd_dkdv_blocked(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let k0 = wid.x * OWNR;   // block 0 sees every query: heaviest first
  // #if DS
  let pair = wid.y + p.pair0;   // (b, KV head) pair: the stored-dS path runs a chunk of them
  // #else
  let pair = wid.y;
  // #endif
  let b = pair / p.nKV;
  let g = pair % p.nKV;
  let to = lid / TS;
  let ts = lid % TS;

  for (var i = lid; i < OWNR * DP; i += NT) {
    let r = i / DP;
    let d4 = i % DP;
    var kv = vec4<f32>(0.0);
    var vv = vec4<f32>(0.0);
    if (k0 + r < T) {
      let base = ((b * T + k0 + r) * p.nKV + g) * D;
      kv = ldK(base, 4u * d4);
      vv = ldV(base, 4u * d4);
    }
    ownA[r * KSTR + d4] = kv;
    ownB[r * KSTR + d4] = vv;
  }

  let keys = vec4<u32>(k0 + 4u * to) + vec4<u32>(0u, 1u, 2u, 3u);
  // aKc / aVc: gradient column ts + TS·c of the 4 keys.
  var aK0 = mat4x4<f32>(); var aK1 = mat4x4<f32>(); var aK2 = mat4x4<f32>(); var aK3 = mat4x4<f32>();
  var aV0 = mat4x4<f32>(); var aV1 = mat4x4<f32>(); var aV2 = mat4x4<f32>(); var aV3 = mat4x4<f32>();
  let nQT = (T + OTHR - 1u) / OTHR;
  for (var hh = 0u; hh < p.G; hh++) {
    let h = g * p.G + hh;
    let bh = b * p.nH + h;
    for (var qt = k0 / OTHR; qt < nQT; qt++) {
      let q0 = qt * OTHR;
      workgroupBarrier();   // the previous tile's reads of othA, othB and PT are done
      for (var i = lid; i < OTHR * DP; i += NT) {
        let r = i / DP;
        let d4 = i % DP;
        var qv = vec4<f32>(0.0);
        var ov = vec4<f32>(0.0);
        if (q0 + r < T) {
          let base = ((b * T + q0 + r) * p.nH + h) * D;
          qv = ldQ(base, 4u * d4);
          ov = ldDO(base, 4u * d4);
        }
        othA[r * KSTR + d4] = qv;
        othB[r * KSTR + d4] = ov;
      }
      workgroupBarrier();

      // Scores s_j / dp_j: query row ts + TS·j against the 4 keys. Zeroed explicitly per tile
      // (Dawn/SwiftShader was seen not to redo a loop-local var's implicit zero-init).
      var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
      var dp0 = vec4<f32>(0.0); var dp1 = vec4<f32>(0.0); var dp2 = vec4<f32>(0.0); var dp3 = vec4<f32>(0.0);
      for (var d4 = 0u; d4 < DP; d4++) {
        let o = 4u * to * KSTR + d4;
        let km = mat4x4<f32>(ownA[o], ownA[o + KSTR], ownA[o + 2u * KSTR], ownA[o + 3u * KSTR]);
        let vm = mat4x4<f32>(ownB[o], ownB[o + KSTR], ownB[o + 2u * KSTR], ownB[o + 3u * KSTR]);
        let r = ts * KSTR + d4;
        s0 += othA[r] * km; dp0 += othB[r] * vm;
        if (RS > 1u) { s1 += othA[r + TS * KSTR] * km; dp1 += othB[r + TS * KSTR] * vm; }
        if (RS > 2u) {
          s2 += othA[r + 2u * TS * KSTR] * km; dp2 += othB[r + 2u * TS * KSTR] * vm;
          s3 += othA[r + 3u * TS * KSTR] * km; dp3 += othB[r + 3u * TS * KSTR] * vm;
        }
      }

      // P and dS of the 4 keys against query q0 + ts + TS·j; P goes to PT first (for dV).
      let st0 = rowStats(bh, q0 + ts);
      let p0 = probs(s0, vec4<f32>(st0.x), keys, vec4<u32>(q0 + ts));
      let ds0 = p0 * (dp0 - st0.y);
      PT[ts * PSTR + to] = p0;
      var ds1 = vec4<f32>(0.0); var ds2 = vec4<f32>(0.0); var ds3 = vec4<f32>(0.0);
      if (RS > 1u) {
        let st = rowStats(bh, q0 + ts + TS);
        let pj = probs(s1, vec4<f32>(st.x), keys, vec4<u32>(q0 + ts + TS));
        ds1 = pj * (dp1 - st.y);
        PT[(ts + TS) * PSTR + to] = pj;
      }
      if (RS > 2u) {
        let st = rowStats(bh, q0 + ts + 2u * TS);
        let pj = probs(s2, vec4<f32>(st.x), keys, vec4<u32>(q0 + ts + 2u * TS));
        ds2 = pj * (dp2 - st.y);
        PT[(ts + 2u * TS) * PSTR + to] = pj;
        let su = rowStats(bh, q0 + ts + 3u * TS);
        let pu = probs(s3, vec4<f32>(su.x), keys, vec4<u32>(q0 + ts + 3u * TS));
        ds3 = pu * (dp3 - su.y);
        PT[(ts + 3u * TS) * PSTR + to] = pu;
      }
      // #if DS
      storeDs4(pair, hh, q0 + ts, keys.x, ds0);
      if (RS > 1u) { storeDs4(pair, hh, q0 + ts + TS, keys.x, ds1); }
      if (RS > 2u) { storeDs4(pair, hh, q0 + ts + 2u * TS, keys.x, ds2); storeDs4(pair, hh, q0 + ts + 3u * TS, keys.x, ds3); }
      // #endif
      workgroupBarrier();

      // dV += Pᵀ·dO over the tile's query rows.
      for (var m = 0u; m < OTHR; m++) {
        let w = PT[m * PSTR + to];
        let r = m * KSTR + ts;
        if (ts < DP) { aV0 += outer(othB[r], w); }
        if (CS > 1u && ts + TS < DP) { aV1 += outer(othB[r + TS], w); }
        if (CS > 2u && ts + 2u * TS < DP) { aV2 += outer(othB[r + 2u * TS], w); }
        if (CS > 3u && ts + 3u * TS < DP) { aV3 += outer(othB[r + 3u * TS], w); }
      }
      workgroupBarrier();   // P reads are done: PT takes dS
      PT[ts * PSTR + to] = ds0;
      if (RS > 1u) { PT[(ts + TS) * PSTR + to] = ds1; }
      if (RS > 2u) { PT[(ts + 2u * TS) * PSTR + to] = ds2; PT[(ts + 3u * TS) * PSTR + to] = ds3; }
      workgroupBarrier();

      // dK += dSᵀ·Q (scale applied at the end).
      for (var m = 0u; m < OTHR; m++) {
        let w = PT[m * PSTR + to];
        let r = m * KSTR + ts;
        if (ts < DP) { aK0 += outer(othA[r], w); }
        if (CS > 1u && ts + TS < DP) { aK1 += outer(othA[r + TS], w); }
        if (CS > 2u && ts + 2u * TS < DP) { aK2 += outer(othA[r + 2u * TS], w); }
        if (CS > 3u && ts + 3u * TS < DP) { aK3 += outer(othA[r + 3u * TS], w); }
      }
    }
  }

  let key0 = k0 + 4u * to;
  if (ts < DP) { putKVColumn(b, g, key0, ts, aK0, aV0); }
  if (CS > 1u && ts + TS < DP) { putKVColumn(b, g, key0, ts + TS, aK1, aV1); }
  if (CS > 2u && ts + 2u * TS < DP) { putKVColumn(b, g, key0, ts + 2u * TS, aK2, aV2); }
  if (CS > 3u && ts + 3u * TS < DP) { putKVColumn(b, g, key0, ts + 3u * TS, aK3, aV3); }
}

@compute @workgroup_size(NT)
fn attn_bwd_dq_blocked(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let nQB = (T + OWNR - 1u) / OWNR;
  let q0 = (nQB - 1u - wid.x) * OWNR;   // heaviest causal block first
  let bh = wid.y;
  let b = bh / p.nH;
  let h = bh % p.nH;
  let g = h / p.G;
  let to = lid / TS;
  let ts = lid % TS;

  for (var i = lid; i < OWNR * DP; i += NT) {
    let r = i / DP;
    let d4 = i % DP;
    var qv = vec4<f32>(0.0);
    var ov = vec4<f32>(0.0);
    if (q0 + r < T) {
      let base = ((b * T + q0 + r) * p.nH + h) * D;
      qv = ldQ(base, 4u * d4);
      ov = ldDO(base, 4u * d4);
    }
    ownA[r * KSTR + d4] = qv;
    ownB[r * KSTR + d4] = ov;
  }

  let t0 = q0 + 4u * to;
  let queries = vec4<u32>(t0) + vec4<u32>(0u, 1u, 2u, 3u);
  let st0 = rowStats(bh, t0);
  let st1 = rowStats(bh, t0 + 1u);
  let st2 = rowStats(bh, t0 + 2u);
  let st3 = rowStats(bh, t0 + 3u);
  let lse2 = vec4<f32>(st0.x, st1.x, st2.x, st3.x);
  let di = vec4<f32>(st0.y, st1.y, st2.y, st3.y);

  // aQc: gradient column ts + TS·c of the 4 queries.
  var aQ0 = mat4x4<f32>(); var aQ1 = mat4x4<f32>(); var aQ2 = mat4x4<f32>(); var aQ3 = mat4x4<f32>();
  let nKB = (min(T, q0 + OWNR) + OTHR - 1u) / OTHR;
  for (var kb = 0u; kb < nKB; kb++) {
    let k0 = kb * OTHR;
    workgroupBarrier();   // the previous tile's reads of othA, othB and PT are done
    for (var i = lid; i < OTHR * DP; i += NT) {
      let r = i / DP;
      let d4 = i % DP;
      var kv = vec4<f32>(0.0);
      var vv = vec4<f32>(0.0);
      if (k0 + r < T) {
        let base = ((b * T + k0 + r) * p.nKV + g) * D;
        kv = ldK(base, 4u * d4);
        vv = ldV(base, 4u * d4);
      }
      othA[r * KSTR + d4] = kv;
      othB[r * KSTR + d4] = vv;
    }
    workgroupBarrier();

    // Scores s_j / dp_j: key row ts + TS·j against the 4 queries.
    var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
    var dp0 = vec4<f32>(0.0); var dp1 = vec4<f32>(0.0); var dp2 = vec4<f32>(0.0); var dp3 = vec4<f32>(0.0);
    for (var d4 = 0u; d4 < DP; d4++) {
      let o = 4u * to * KSTR + d4;
      let qm = mat4x4<f32>(ownA[o], ownA[o + KSTR], ownA[o + 2u * KSTR], ownA[o + 3u * KSTR]);
      let om = mat4x4<f32>(ownB[o], ownB[o + KSTR], ownB[o + 2u * KSTR], ownB[o + 3u * KSTR]);
      let r = ts * KSTR + d4;
      s0 += othA[r] * qm; dp0 += othB[r] * om;
      if (RS > 1u) { s1 += othA[r + TS * KSTR] * qm; dp1 += othB[r + TS * KSTR] * om; }
      if (RS > 2u) {
        s2 += othA[r + 2u * TS * KSTR] * qm; dp2 += othB[r + 2u * TS * KSTR] * om;
        s3 += othA[r + 3u * TS * KSTR] * qm; dp3 += othB[r + 3u * TS * KSTR] * om;
      }
    }

    // dS of the 4 queries against key k0 + ts + TS·j.
    PT[ts * PSTR + to] = probs(s0, lse2, vec4<u32>(k0 + ts), queries) * (dp0 - di);
    if (RS > 1u) { PT[(ts + TS) * PSTR + to] = probs(s1, lse2, vec4<u32>(k0 + ts + TS), queries) * (dp1 - di); }
    if (RS > 2u) {
      PT[(ts + 2u * TS) * PSTR + to] = probs(s2, lse2, vec4<u32>(k0 + ts + 2u * TS), queries) * (dp2 - di);
      PT[(ts + 3u * TS) * PSTR + to] = probs(s3, lse2, vec4<u32>(k0 + ts + 3u * TS), queries) * (dp3 - di);
    }
    workgroupBarrier();

    // dQ += dS·K (scale applied at the end).
    for (var n = 0u; n < OTHR; n++) {
      let w = PT[n * PSTR + to];
      let r = n * KSTR + ts;
      if (ts < DP) { aQ0 += outer(othA[r], w); }
      if (CS > 1u && ts + TS < DP) { aQ1 += outer(othA[r + TS], w); }
      if (CS > 2u && ts + 2u * TS < DP) { aQ2 += outer(othA[r + 2u * TS], w); }
      if (CS > 3u && ts + 3u * TS < DP) { aQ3 += outer(othA[r + 3u * TS], w); }
    }
  }

  if (ts < DP) { putQColumn(b, h, t0, ts, aQ0); }
  if (CS > 1u && ts + TS < DP) { putQColumn(b, h, t0, ts + TS, aQ1); }
  if (CS > 2u && ts + 2u * TS < DP) { putQColumn(b, h, t0, ts + 2u * TS, aQ2); }
  if (CS > 3u && ts + 3u * TS < DP) { putQColumn(b, h, t0, ts + 3u * TS, aQ3); }
}
