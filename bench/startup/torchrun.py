"""torchrun, as /usr/bin/torchrun, runnable on Debian 12's python3-torch (1.13) + Python 3.11.

torch 1.13's Std.from_str("0") returns None on Python 3.11 (iterating an IntFlag no longer
yields its 0-valued NONE member), so the stock launcher dies with "'NoneType' object has no
attribute 'get'" before starting any worker. This maps None back to Std.NONE, only when the
installed torch has the bug, then runs the stock torch.distributed.run.main().
"""
from torch.distributed.elastic.multiprocessing import api
from torch.distributed.run import main

if api.Std.from_str("0") is None:
    _from_str = api.Std.from_str.__func__

    def _fixed_from_str(cls, vm):
        r = _from_str(cls, vm)
        if isinstance(r, dict):
            return {k: (api.Std.NONE if v is None else v) for k, v in r.items()}
        return api.Std.NONE if r is None else r

    api.Std.from_str = classmethod(_fixed_from_str)

if __name__ == "__main__":
    main()
