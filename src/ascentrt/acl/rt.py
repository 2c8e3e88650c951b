"""acl.rt: pyACL's runtime namespace (devices, contexts, streams, events, notifies, callbacks, memory, errors)."""

from ._callback import *  # noqa: F401,F403
from ._device import *  # noqa: F401,F403
from ._errors import *  # noqa: F401,F403
from ._event import *  # noqa: F401,F403
from ._kernel import *  # noqa: F401,F403
from ._memory import *  # noqa: F401,F403
from ._memops import *  # noqa: F401,F403
from ._notify import *  # noqa: F401,F403
from ._stream import *  # noqa: F401,F403
from . import _callback, _device, _errors, _event, _kernel, _memops, _memory, _notify, _stream

__all__ = sorted(name for m in (_callback, _device, _errors, _event, _kernel, _memops, _memory,
                                _notify, _stream) for name in m.__all__)
del _callback, _device, _errors, _event, _kernel, _memops, _memory, _notify, _stream
