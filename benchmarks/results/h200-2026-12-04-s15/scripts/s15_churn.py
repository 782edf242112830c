"""How many loads of a bundle one process survives on this driver: instances created and destroyed
(list_devices), devices created and destroyed with the instance kept (one pinned reference), and
whole loads (instance and device each time)."""
import sys, time
sys.path[:0] = ['.']
import numpy as np
import runtime_min
from runtime_min import device as rd, load, list_devices

bundle = open('.bench/tiny.vkb', 'rb').read()
feeds = None


def one_load():
    global feeds
    with load(bundle) as m:
        feeds = feeds or {t.name: np.ones(t.shape, t.dtype) for t in m.inputs}
        m.run(feeds)


def survive(what, fn, n=80):
    t0 = time.time()
    for i in range(n):
        try:
            fn()
        except Exception as e:
            print(f'{what}: failed at {i + 1}: {type(e).__name__}: {str(e)[:160]}', flush=True)
            return
    print(f'{what}: {n} ok, {(time.time() - t0) / n * 1e3:.1f} ms each', flush=True)


mode = sys.argv[1]
if mode == 'instances':
    survive('instance create/destroy', list_devices)
elif mode == 'devices':
    pin = rd._instance(False)
    survive('device create/destroy, instance kept', one_load)
elif mode == 'loads':
    survive('whole loads', one_load)
