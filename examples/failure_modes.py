"""Failure modes: CONTINUE runs on after a failed task, STOP discards the rest and refuses more."""

import sys

import ascentrt as art


def broken_kernel():
    """A kernel that fails."""
    raise ValueError("bad input data")


def run(mode: art.FailureMode) -> list[int]:
    """Launch a failing kernel between good ones; report what ran and what the runtime said."""
    dev = art.set_device(0)
    stream = dev.create_stream()
    stream.set_failure_mode(mode)
    ran = []
    art.launch(lambda: ran.append(1), stream=stream)
    art.launch(broken_kernel, stream=stream)
    art.launch(lambda: ran.append(3), stream=stream)
    try:
        stream.synchronize(timeout=10)
    except art.TaskError as exc:
        info = exc.info
        print(f"{mode.name}: synchronize raised error {info.error_code} for task {info.task_id} "
              f"({info.task_name}) on device {info.device_id} stream {info.stream_id}: "
              f"{type(info.cause).__name__}: {info.cause}")
    print(f"{mode.name}: tasks that ran: {ran}; get_last_error() = {art.get_last_error()}")
    try:
        art.launch(lambda: ran.append(4), stream=stream)
        stream.synchronize(timeout=10)
        print(f"{mode.name}: the stream still takes work")
    except art.StreamStateError as exc:
        print(f"{mode.name}: new work refused with error {int(exc.code)}")
    stream.destroy(force=True)
    return ran


def main() -> int:
    """Show both failure modes side by side."""
    cont = run(art.FailureMode.CONTINUE)
    stop = run(art.FailureMode.STOP)
    return 0 if cont == [1, 3, 4] and stop == [1] else 1


if __name__ == "__main__":
    sys.exit(main())
