# torchrun for Debian's python3-torch 1.13 on Python 3.11. There Std.from_str("0") returns
# None (IntFlag iteration no longer yields the 0-valued NONE member), and torchrun dies with
# "'NoneType' object has no attribute 'get'". This maps None back to Std.NONE, then runs the
# stock launcher: /usr/bin/python3 torchrun_py311.py --nproc_per_node 2 ... script.py
from torch.distributed.elastic.multiprocessing import api

_orig = api.Std.from_str.__func__


def _from_str(cls, vm):
    r = _orig(cls, vm)
    if isinstance(r, dict):
        return {k: (api.Std.NONE if v is None else v) for k, v in r.items()}
    return api.Std.NONE if r is None else r


api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402

main()
