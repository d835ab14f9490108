mkdir -p $OUT/ceil1
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE > $OUT/ceil1/smi_q.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 50 > $OUT/ceil1/smi.csv 2>&1 &
SMI=$!
timeout 200 node gemm_ceiling.mjs --rounds 3 --sustain 3000 > $OUT/ceil1/ceiling.log 2>&1; echo ceiling rc=$?
cat > /tmp/sust.py <<'PY'
import time, datetime, torch
torch.backends.cuda.matmul.allow_tf32 = False
n = 4096
a = torch.randn(n, n, device='cuda'); b = torch.randn(n, n, device='cuda')
for _ in range(20): torch.mm(a, b)
torch.cuda.synchronize()
ts = []
for _ in range(5):
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10): torch.mm(a, b)
    e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / 10)
ts.sort(); print(f"cuBLAS sgemm 4096: {ts[2]:.4f} ms {2*n**3/ts[2]/1e9:.1f} TFLOP/s")
start = datetime.datetime.utcnow().isoformat(); t0 = time.time(); runs = 0
while time.time() - t0 < 3:
    for _ in range(20): torch.mm(a, b)
    torch.cuda.synchronize(); runs += 20
ms = (time.time() - t0) * 1e3 / runs
print(f"sustain cuBLAS: {start} .. {datetime.datetime.utcnow().isoformat()} {runs} runs {2*n**3/ms/1e9:.1f} TFLOP/s wall")
PY
python3 /tmp/sust.py > $OUT/ceil1/torch.log 2>&1; echo torch rc=$?
kill $SMI
cat $OUT/ceil1/ceiling.log $OUT/ceil1/torch.log
head -3 $OUT/ceil1/smi.csv
cd $OUT && tar czf ceil1.tgz ceil1 && rm -rf ceil1
