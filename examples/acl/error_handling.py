"""Error handling: return codes, last error, recent message, exception-info callbacks, no crashes."""

import ascentrt.acl as acl
from ascentrt.acl import constants as C


def main():
    assert acl.init() == C.ACL_SUCCESS
    assert acl.init() == C.ACL_ERROR_REPEAT_INITIALIZE   # counted; commonly treated as OK

    # Before set_device there is no context.
    stream, ret = acl.rt.create_stream()
    print("create_stream without a device ->", ret)
    assert ret == C.ACL_ERROR_RT_CONTEXT_NULL
    assert acl.rt.set_device(-1) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.peek_at_last_error(C.ACL_RT_THREAD_LEVEL) != 0
    assert acl.rt.get_last_error(C.ACL_RT_THREAD_LEVEL) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.get_last_error(C.ACL_RT_THREAD_LEVEL) == 0   # cleared by the first get

    assert acl.rt.set_device(0) == 0
    stream, _ = acl.rt.create_stream()
    # Random ints as pointers are rejected, never dereferenced.
    ret = acl.rt.memcpy(0xDEADBEEF000, 64, 0x1234, 64, C.ACL_MEMCPY_DEVICE_TO_DEVICE)
    print("memcpy between made-up pointers ->", ret, "|", acl.get_recent_err_msg())
    assert ret == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.free(0) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.synchronize_stream_with_timeout(stream, 0) == C.ACL_ERROR_RT_PARAM_INVALID
    try:
        acl.rt.create_stream(1)
    except TypeError as exc:
        print("wrong argument count ->", exc)

    # A failing task: its code comes back at synchronization and to the exception callback.
    infos = []
    assert acl.rt.set_exception_info_callback(infos.append) == 0

    def failing_kernel():
        raise RuntimeError("device-side failure")

    acl.rt.launch_kernel(failing_kernel, (), stream)
    ret = acl.rt.synchronize_stream(stream)
    print("synchronize after a failing kernel ->", ret)
    assert ret == C.ACL_ERROR_RT_AICORE_EXCEPTION
    info = infos[0]
    stream_id, _ = acl.rt.stream_get_id(stream)
    assert acl.rt.get_error_code_from_exception_info(info) == ret
    assert acl.rt.get_stream_id_from_exception_info(info) == stream_id
    print(f"exception info: task {acl.rt.get_task_id_from_exception_info(info)} on device "
          f"{acl.rt.get_device_id_from_exception_info(info)} stream {stream_id}")
    acl.rt.set_exception_info_callback()

    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_stream(stream) == C.ACL_ERROR_RT_INVALID_HANDLE
    assert acl.rt.reset_device(0) == 0
    assert acl.rt.reset_device(0) == C.ACL_ERROR_RT_CONTEXT_RELEASE_ERROR
    assert acl.finalize() == 0
    assert acl.finalize() == C.ACL_ERROR_REPEAT_FINALIZE
    print("error handling OK")


if __name__ == "__main__":
    main()
