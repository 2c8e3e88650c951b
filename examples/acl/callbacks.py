"""Host callbacks served by a report thread (subscribe_report / launch_callback / process_report)."""

import threading

import ascentrt.acl as acl
from ascentrt.acl.constants import ACL_CALLBACK_BLOCK, ACL_CALLBACK_NO_BLOCK, ACL_SUCCESS


def main():
    acl.init()
    acl.rt.set_device(0)
    context, _ = acl.rt.get_context()
    stream, _ = acl.rt.create_stream()
    stop = threading.Event()
    seen = []

    def report_loop(ctx):
        acl.rt.set_context(ctx)           # new threads have no context until they set one
        while not stop.is_set():
            acl.rt.process_report(100)    # 507012 when nothing came within 100 ms: loop again

    thread_id, ret = acl.util.start_thread(report_loop, context)
    assert ret == ACL_SUCCESS
    assert acl.rt.subscribe_report(thread_id, stream) == ACL_SUCCESS

    def on_done(user_data):
        seen.append((user_data, threading.get_ident() == thread_id))

    # The report thread runs callbacks in order: once the blocking one ran, so had the first.
    acl.rt.launch_kernel(lambda: None, (), stream)
    assert acl.rt.launch_callback(on_done, "non-blocking", ACL_CALLBACK_NO_BLOCK, stream) == ACL_SUCCESS
    assert acl.rt.launch_callback(on_done, "blocking", ACL_CALLBACK_BLOCK, stream) == ACL_SUCCESS
    acl.rt.launch_kernel(lambda: seen.append(("kernel after the blocking callback", True)), (), stream)
    assert acl.rt.synchronize_stream(stream) == ACL_SUCCESS   # blocking callbacks have run by now

    assert acl.rt.unsubscribe_report(thread_id, stream) == ACL_SUCCESS
    stop.set()
    assert acl.util.stop_thread(thread_id) == ACL_SUCCESS
    for item in seen:
        print("ran:", item)
    assert seen == [("non-blocking", True), ("blocking", True),
                    ("kernel after the blocking callback", True)]
    acl.rt.destroy_stream(stream)
    acl.rt.reset_device(0)
    acl.finalize()
    print("callbacks OK")


if __name__ == "__main__":
    main()
