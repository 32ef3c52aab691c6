"""NVTX ranges as scopes: CUPTI's NVTX callback data built as CUPTI passes it (the structs of
nvToolsExt and cupti_nvtx_cbid.h), handed to the handler the collector subscribes on a GPU."""
from __future__ import annotations

import ctypes

import pytest

from conftest import find

import proton
from proton.api import write_profiles
from proton.context.frames import unwind
from proton.cupti import nvtx as cupti_nvtx
from proton.runtime import nvtx


class Attributes(ctypes.Structure):  # nvtxEventAttributes_t, version 2
    _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16),
                ("category", ctypes.c_uint32), ("colorType", ctypes.c_int32),
                ("color", ctypes.c_uint32), ("payloadType", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("payload", ctypes.c_uint64),
                ("messageType", ctypes.c_int32), ("message", ctypes.c_void_p)]


class NvtxData(ctypes.Structure):  # CUpti_NvtxData
    _fields_ = [("functionName", ctypes.c_char_p), ("functionParams", ctypes.c_void_p),
                ("functionReturnValue", ctypes.c_void_p)]


assert ctypes.sizeof(Attributes) == 48 and Attributes.message.offset == cupti_nvtx.MESSAGE_AT

_keep: list = []


def call(scopes: nvtx.NvtxScopes, cbid: int, params=None) -> None:
    data = NvtxData(b"nvtx", ctypes.cast(ctypes.pointer(params), ctypes.c_void_p)
                    if params is not None else None, None)
    _keep.append((data, params))
    scopes.handle(cbid, ctypes.addressof(data))


def push_a(scopes, name: str) -> None:
    text = ctypes.create_string_buffer(name.encode())
    _keep.append(text)
    call(scopes, cupti_nvtx.PUSH_A, ctypes.c_void_p(ctypes.addressof(text)))


def push_ex(scopes, name: str, wide: bool = False) -> None:
    text = ctypes.create_unicode_buffer(name) if wide else ctypes.create_string_buffer(
        name.encode())
    attrib = Attributes(version=2, size=48, messageType=cupti_nvtx.UNICODE if wide else cupti_nvtx.ASCII,
                        message=ctypes.addressof(text))
    _keep.extend([text, attrib])
    call(scopes, cupti_nvtx.PUSH_EX, ctypes.c_void_p(ctypes.addressof(attrib)))


@pytest.fixture(autouse=True)
def no_live_sessions():
    yield
    unwind(0)
    write_profiles()


def test_nvtx_ranges_nest_as_scopes_around_proton_scopes(profile_path):
    name, read = profile_path
    scopes = nvtx.NvtxScopes(cupti_nvtx.DOMAIN)
    proton.start(name)
    push_a(scopes, "train_step")
    with proton.scope("forward"):
        push_ex(scopes, "attention")
        call(scopes, cupti_nvtx.POP)
        push_ex(scopes, "all_reduce")
        call(scopes, cupti_nvtx.POP)
        push_ex(scopes, "ünïcode", wide=True)
        call(scopes, cupti_nvtx.POP)
    call(scopes, cupti_nvtx.POP)
    call(scopes, cupti_nvtx.POP)  # a pop without its push: nothing to close
    with proton.scope("after"):
        pass
    proton.finalize()
    root, _ = read()
    forward = find(root, "train_step", "forward")
    assert sorted(c["frame"]["name"] for c in forward["children"]) == [
        "all_reduce", "attention", "ünïcode"]
    assert [c["frame"]["name"] for c in root["children"]] == ["after", "train_step"]


def test_a_librarys_own_nvtx_domain_is_not_subscribed():
    # NCCL pushes a range in its own domain around every collective (nvtxDomainRangePushEx,
    # CUPTI's cbid 33, popped by 34); on two GPUs one stayed open and took the job's scopes
    scopes = nvtx.NvtxScopes(cupti_nvtx.DOMAIN)
    assert sorted(cbid for _, cbid in scopes.callbacks) == [8, 9, 10, 11]


def test_a_pop_leaves_a_scope_opened_inside_the_range_alone(profile_path):
    name, read = profile_path
    scopes = nvtx.NvtxScopes(cupti_nvtx.DOMAIN)
    proton.start(name)
    push_a(scopes, "range")
    proton.enter_scope("mine")
    call(scopes, cupti_nvtx.POP)  # "mine" is innermost: the range cannot close under it
    proton.exit_scope("mine")
    with proton.scope("later"):
        pass
    proton.finalize()
    root, _ = read()
    assert find(root, "range", "mine") and find(root, "range", "later")


def test_a_range_without_a_readable_name_still_pairs_with_its_pop(profile_path):
    name, read = profile_path
    scopes = nvtx.NvtxScopes(cupti_nvtx.DOMAIN)
    proton.start(name)
    attrib = Attributes(version=2, size=48, messageType=3, message=7)  # a registered handle
    _keep.append(attrib)
    call(scopes, cupti_nvtx.PUSH_EX, ctypes.c_void_p(ctypes.addressof(attrib)))
    call(scopes, cupti_nvtx.POP)
    with proton.scope("after"):
        pass
    proton.finalize()
    root, _ = read()
    assert sorted(c["frame"]["name"] for c in root["children"]) == ["<nvtx range>", "after"]


@pytest.mark.parametrize("value,on", [(None, True), ("1", True), ("0", False),
                                      ("false", False), ("off", False), ("yes", True)])
def test_triton_enable_nvtx_turns_it_off(monkeypatch, value, on):
    monkeypatch.delenv("PROTON_ENABLE_NVTX", raising=False)
    if value is None:
        monkeypatch.delenv("TRITON_ENABLE_NVTX", raising=False)
    else:
        monkeypatch.setenv("TRITON_ENABLE_NVTX", value)
    assert nvtx.enabled() is on


def test_other_domains_pass_through_to_the_callback_it_wraps():
    seen = []
    scopes = nvtx.NvtxScopes(cupti_nvtx.DOMAIN)
    wrapped = scopes.wrap(lambda *args: seen.append(args))
    wrapped(None, 1, 22, 0)
    assert seen == [(None, 1, 22, 0)]
    assert scopes.wrap(None)(None, 1, 22, 0) is None


def test_the_injection_is_set_for_the_session_only_and_a_users_choice_is_kept(monkeypatch):
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    scopes = nvtx.NvtxScopes(cupti_nvtx.DOMAIN)
    scopes.prepare("/lib/libcupti.so.13")
    import os

    assert os.environ["NVTX_INJECTION64_PATH"] == "/lib/libcupti.so.13"
    scopes.release()
    assert "NVTX_INJECTION64_PATH" not in os.environ
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/opt/mine.so")
    scopes.prepare("/lib/libcupti.so.13")
    scopes.release()
    assert os.environ["NVTX_INJECTION64_PATH"] == "/opt/mine.so"


def test_a_callback_sees_the_programs_frame_past_the_ones_that_pass_the_call_on():
    """The python context's launch callback reads its caller's frame; NVTX, graph and PC
    sampling callbacks may sit between CUPTI and it."""
    import sys

    from proton.cupti.subscriber import caller, passes_on

    seen = []

    def launch_callback():
        seen.append(caller(sys._getframe().f_back))

    @passes_on
    def nvtx_wrapper():
        launch_callback()

    @passes_on
    def graph_wrapper():
        nvtx_wrapper()

    def program():
        graph_wrapper()

    program()
    assert seen[0].f_code is program.__code__
    assert caller(None) is None
