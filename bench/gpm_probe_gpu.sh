#!/usr/bin/env bash
# Issue 23 on the lent H100, passed inline to the device tool (its 2,000-character command):
# the device tool sends the main checkout only, so this branch's code could not travel;
# this probes NVML GPM with the image's nvidia-ml-py and torch alone, as root and as nobody:
# GPM support, each catalog metric over 2 s of idle / bf16 8192^3 GEMM / 2^28 fp32 add, and
# the cost of one GPM sample and of the four instant reads.
cat > /tmp/p.py <<'E'
import pynvml as n,torch,time,os
n.nvmlInit();h=n.nvmlDeviceGetHandleByIndex(0)
M=[1,2,3,5,10,12,13,20,21,60,61]
def gpm(f,s=2.0):
 a=n.nvmlGpmSampleAlloc();b=n.nvmlGpmSampleAlloc()
 n.nvmlGpmSampleGet(h,a);t=time.time();k=0
 while time.time()-t<s:f();k+=1
 torch.cuda.synchronize();n.nvmlGpmSampleGet(h,b);d=time.time()-t
 g=n.c_nvmlGpmMetricsGet_t();g.version=n.NVML_GPM_METRICS_GET_VERSION;g.numMetrics=len(M);g.sample1=a;g.sample2=b
 for i,m in enumerate(M):g.metrics[i].metricId=m
 n.nvmlGpmMetricsGet(g)
 return k,round(d,2),{m:(round(g.metrics[i].value,1),g.metrics[i].nvmlReturn) for i,m in enumerate(M)}
print('uid',os.getuid(),'driver',n.nvmlSystemGetDriverVersion(),'name',n.nvmlDeviceGetName(h))
try:print('gpm support',n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
except Exception as e:print('gpm support error',repr(e))
A=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16);C=A@A
x=torch.randn(1<<28,device='cuda');y=torch.empty_like(x);torch.cuda.synchronize()
for name,f in [('idle',lambda:time.sleep(0.01)),('gemm',lambda:torch.matmul(A,A,out=C)),('vadd',lambda:torch.add(x,x,out=y))]:
 try:print(name,gpm(f))
 except Exception as e:print(name,'error',repr(e))
try:
 a=n.nvmlGpmSampleAlloc();t=time.perf_counter()
 for _ in range(100):n.nvmlGpmSampleGet(h,a)
 t1=time.perf_counter()
 for _ in range(100):n.nvmlDeviceGetMemoryInfo(h);n.nvmlDeviceGetClockInfo(h,1);n.nvmlDeviceGetPowerUsage(h);n.nvmlDeviceGetUtilizationRates(h)
 print('us per GpmSampleGet',round((t1-t)*1e4),'us per 4 instant reads',round((time.perf_counter()-t1)*1e4))
except Exception as e:print('timing error',repr(e))
E
python3 -c "import importlib.metadata as m;print('nvidia-ml-py',m.version('nvidia-ml-py'))"
python3 /tmp/p.py
echo "== as nobody"
setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp python3 /tmp/p.py
