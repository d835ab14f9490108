/**
 * The adversarial suite's signalling and admission attacks (tests/peers/adversary/) against a
 * Chromium page: the page creates a group with a passphrase; a stranger and a link holder, speaking
 * raw PeerServer messages from Node, send the one-message OFFER crashes and a candidate flood for
 * unknown connections (Sybil ids under the room's tag the PeerServer refuses); the page must raise no error, keep its JS heap within
 * +50 MB, and still admit an honest member (and refuse a wrong passphrase). Run by tests/e2e/run.ts
 * (`npm run test:e2e -- --only adversary` runs it alone). No WebGPU needed: nothing trains.
 */
import { installNodeWebRtc } from '../../src/peers/transport/node-webrtc';
import { PeerJsTransport } from '../../src/peers/peerjs/peerjs';
import { parseRoomLink, sameOriginServer } from '../../src/peers/room/room';
import { discoveryOf, linkHolderId, RawSignal, sleep, strangerId } from '../peers/adversary/stranger';
import { byTestId, type Ctx, type TestCase, type TestHelpers } from './harness';

type Check = (cond: unknown, message: string) => asserts cond;
const PASSPHRASE = 'hunter2 hunter2';

export function adversaryTests(check: Check): TestCase[] {
  return [
    {
      name: 'adversary: a page survives PeerServer crash messages, a candidate flood and Sybil offers, then admits an honest member',
      timeoutMs: 3 * 60_000,
      async fn(ctx: Ctx, t: TestHelpers) {
        installNodeWebRtc();
        const page = await t.page(await ctx.plainBrowser());
        const errors: string[] = [];
        page.on('pageerror', (e) => errors.push(e.message));
        await page.goto(ctx.url);
        await page.locator(byTestId('group-panel')).waitFor({ timeout: 30_000 });
        await page.locator(byTestId('group-passphrase')).fill(PASSPHRASE);
        await page.locator(byTestId('group-create')).click();
        const link = await page.locator(byTestId('group-link')).inputValue({ timeout: 30_000 });
        const victim = await page.locator(byTestId('group-self')).innerText();
        const room = parseRoomLink(link).room;
        const port = Number(new URL(ctx.url).port);
        const cdp = await page.context().newCDPSession(page);
        const heapMb = async () => {
          await cdp.send('HeapProfiler.collectGarbage');
          return (await cdp.send('Runtime.getHeapUsage')).usedSize / 1e6;
        };
        const before = await heapMb();

        const raws: RawSignal[] = [];
        try {
          // The PeerServer refuses ids under a listed room's tag without a valid mark, so strangers
          // register in rooms of their own and send to the page from there. Its per-socket budget
          // (1 MiB at once) would cut one flooding socket off: the flood is spread over sockets, each
          // within it, so that all of it reaches the page.
          const holders = await Promise.all(Array.from({ length: 8 }, () => RawSignal.connect(port, linkHolderId(discoveryOf(room)))));
          const strangers = await Promise.all(Array.from({ length: 12 }, () => RawSignal.connect(port, strangerId())));
          raws.push(...holders, ...strangers);
          const good = { connectionId: 'dc_x', type: 'data', serialization: 'raw', reliable: true, label: 'x', sdp: { type: 'offer', sdp: 'v=0\r\n' } };
          for (const s of [strangers[0], holders[0]]) {
            for (const payload of [undefined, null, { ...good, serialization: 'bogus' }, {}, { ...good, sdp: 'not an sdp' }]) s.send({ type: 'OFFER', dst: victim, payload });
          }
          // Candidates for unknown connections: 5,000 valid-looking (1 KB) and 2,500 oversized (4 KB).
          const cand = (cid: string, n: number) => ({ type: 'CANDIDATE', dst: victim, payload: { connectionId: cid, type: 'data', candidate: { candidate: 'a'.repeat(n), sdpMid: '0', sdpMLineIndex: 0 } } });
          for (let i = 0; i < 5000; i++) {
            holders[i % holders.length].send(cand(`dc_${i}`, 1000));
            if (i % 2 === 0) strangers[(i / 2) % strangers.length].send(cand(`dc_y${i}`, 4000));
            if (i % 500 === 499) await Promise.all(raws.map((r) => r.flushed()));
          }
          // Sybils under the room's tag: the PeerServer knows the room's discovery key (the page
          // listed it) and registers none (their offers would set nothing up at the page either:
          // tests/peers/adversary/signalling.test.ts).
          const sybils = await Promise.allSettled(Array.from({ length: 10 }, () => RawSignal.connect(port, strangerId(victim.split('-')[0]))));
          check(sybils.every((s) => s.status === 'rejected'), 'the PeerServer registered a Sybil id under the room\'s tag');
          await Promise.all(raws.map((r) => r.flushed()));
          check(raws.every((r) => r.open), 'the PeerServer cut a flooding socket off: not all of the flood reached the page');
          await sleep(3000);
          const after = await heapMb();
          t.log(`  page JS heap ${before.toFixed(1)} → ${after.toFixed(1)} MB`);
          check(after - before < 50, `page heap grew by ${(after - before).toFixed(1)} MB`);
          check(errors.length === 0, `page errors: ${errors.join(' | ')}`);

          // Still a working member: a wrong passphrase is refused, the right one admitted.
          const server = sameOriginServer(link);
          // Deadlines are for a loaded 2-core CI machine (the page is still digesting the flood); a
          // miss names what the joining transport reported, so it can be told from a slow machine.
          const problems: string[] = [];
          const wrong = await PeerJsTransport.open({ room, passphrase: 'hunter3', server });
          try {
            wrong.onProblem((p) => problems.push(`wrong: ${p.kind} ${p.message}`));
            const refused = await wrong.whenAdmitted(60_000).then(() => '', (e: Error) => e.message);
            check(/wrong passphrase/.test(refused), `a wrong passphrase was not refused (${refused || 'admitted'}; ${problems.join(' | ')})`);
          } finally {
            wrong.close();
          }
          const honest = await PeerJsTransport.open({ room, passphrase: PASSPHRASE, server });
          try {
            honest.onProblem((p) => problems.push(`honest: ${p.kind} ${p.message}`));
            const failed = await honest.whenAdmitted(60_000).then(() => '', (e: Error) => e.message);
            check(failed === '', `the honest member was not admitted: ${failed}; reported: ${problems.join(' | ') || 'nothing'}`);
            check(honest.peers().includes(victim), 'the honest member is not linked to the page');
            // The page's roster counts itself and the honest member as admitted.
            await page.locator(`${byTestId('group-roster')}[data-members="2"]`).waitFor({ timeout: 10_000 });
          } finally {
            honest.close();
          }
          check(errors.length === 0, `page errors: ${errors.join(' | ')}`);
        } finally {
          for (const r of raws) r.close();
        }
      },
    },
  ];
}
