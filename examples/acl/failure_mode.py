"""Stream failure modes: CONTINUE runs the tasks after a failed one, STOP refuses them."""

import ascentrt.acl as acl
from ascentrt.acl.constants import (ACL_CONTINUE_ON_FAILURE, ACL_ERROR_RT_AICORE_EXCEPTION,
                                    ACL_STOP_ON_FAILURE, ACL_SUCCESS)


def run(mode):
    stream, _ = acl.rt.create_stream()
    assert acl.rt.set_stream_failure_mode(stream, mode) == ACL_SUCCESS
    ran = []

    def broken():
        raise ZeroDivisionError("a kernel bug")

    acl.rt.launch_kernel(broken, (), stream)
    acl.rt.launch_kernel(ran.append, ("after",), stream)
    sync_ret = acl.rt.synchronize_stream(stream)
    later_ret = acl.rt.launch_kernel(ran.append, ("later",), stream)
    acl.rt.synchronize_stream(stream)
    acl.rt.destroy_stream_force(stream)
    return sync_ret, later_ret, ran


def main():
    acl.init()
    acl.rt.set_device(0)
    sync_ret, later_ret, ran = run(ACL_CONTINUE_ON_FAILURE)
    print(f"CONTINUE: synchronize -> {sync_ret}, later launch -> {later_ret}, ran {ran}")
    assert sync_ret == ACL_ERROR_RT_AICORE_EXCEPTION and later_ret == 0 and ran == ["after", "later"]

    sync_ret, later_ret, ran = run(ACL_STOP_ON_FAILURE)
    print(f"STOP:     synchronize -> {sync_ret}, later launch -> {later_ret}, ran {ran}")
    assert sync_ret == ACL_ERROR_RT_AICORE_EXCEPTION and later_ret != 0 and ran == []
    acl.rt.reset_device(0)
    acl.finalize()
    print("failure mode OK")


if __name__ == "__main__":
    main()
