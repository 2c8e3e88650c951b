"""`import acl` in a program that ascentrt runs (ascentrt run, prof, sanitize, whatif): the
module is ascentrt's pyACL facade, so a pyACL program runs with not even its import changed."""

import sys

import ascentrt.acl as _facade
from ascentrt.acl import rt as _rt, util as _util

# (the facade itself, not a copy: `import acl.rt` and `from acl import util` find it too)
sys.modules[__name__] = _facade
sys.modules[__name__ + ".rt"] = _rt
sys.modules[__name__ + ".util"] = _util
for _name in _facade._UNSUPPORTED_MODULES:  # (each name of them says it is not provided)
    sys.modules[f"{__name__}.{_name}"] = getattr(_facade, _name)
