"""Host functions: run Python on the host in stream order, blocking or not."""

import sys
import threading

import numpy as np

import ascentrt as art


def main() -> int:
    """A blocking host function sees the kernel's result; a non-blocking one lets the stream go on."""
    dev = art.set_device(0)
    stream = dev.create_stream()
    buf = art.malloc(4 * 8)
    log = []

    def report(tag):
        log.append(tag)
        print(f"host function '{tag}' on thread {threading.current_thread().name}: "
              f"buffer = {buf.numpy(np.int32).tolist()}")

    art.launch(art.kernels.fill, buf.view(np.int32), 7, stream=stream)
    art.launch_host_func(report, "after fill", stream=stream)            # blocking (default)
    art.launch(art.kernels.scale, buf.view(np.int32), buf.view(np.int32), 3, stream=stream)
    release = threading.Event()
    art.launch_host_func(lambda: (release.wait(10), log.append("slow")), stream=stream,
                         blocking=False)
    art.launch(lambda: log.append("kernel after the non-blocking host function"), stream=stream)
    stream.synchronize(timeout=10)
    print(f"stream done while the non-blocking host function still waits: {log}")
    release.set()
    art.synchronize(timeout=10)
    print(f"after device synchronize: {log}")
    ok = log == ["after fill", "kernel after the non-blocking host function", "slow"] and \
        buf.numpy(np.int32).tolist() == [21] * 8
    stream.destroy()
    buf.free()
    print(f"order: {'as expected' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
