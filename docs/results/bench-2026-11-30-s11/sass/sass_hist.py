import sys, collections
NAMES = {0x023:'FFMA',0x024:'IMAD',0x010:'IADD3',0x012:'LOP3',0x00c:'ISETP',0x019:'SHF',0x011:'LEA',0x002:'MOV',0x007:'SEL',
 0x017:'IMNMX',0x020:'FMUL',0x021:'FADD',0x184:'LDS',0x188:'STS',0x181:'LDG',0x186:'STG',0x183:'LDL',0x187:'STL',0x11d:'BAR',
 0x147:'BRA',0x14d:'EXIT',0x119:'S2R',0x118:'NOP',0x11a:'DEPBAR',0x145:'BSSY',0x141:'BSYNC',0x148:'WARPSYNC',0x182:'LDC',0x0b9:'ULDC'}
def ops(d, a=8):
    return [((d[p] | (d[p+1] << 8)) & 0xfff) for p in range(a, len(d) - 16, 16)]
for f in sys.argv[1:]:
    d = open(f,'rb').read()
    o = ops(d)
    ff = [i for i,x in enumerate(o) if x == 0x223]
    # the largest run of FFMAs with gaps under 300 instructions (a stray data word can match too)
    runs=[[ff[0]]]
    for x in ff[1:]:
        (runs[-1].append(x) if x - runs[-1][-1] < 300 else runs.append([x]))
    ff = max(runs, key=len)
    # region: from first FFMA back to 400 instrs, to last FFMA + 400
    lo, hi = max(0, ff[0]-300), min(len(o), ff[-1]+300)
    # find EXIT after last ffma
    ex = [i for i in range(ff[-1], len(o)) if o[i] & 0x1ff == 0x14d]
    print(f.split('/')[3], 'FFMA count', len(ff), 'span', ff[0], ff[-1], 'EXIT after', ex[:3])
    h = collections.Counter(NAMES.get(x & 0x1ff, hex(x)) for x in o[ff[0]:ff[-1]+1])
    print('  in FFMA span:', sorted(h.items(), key=lambda kv:-kv[1])[:25])
