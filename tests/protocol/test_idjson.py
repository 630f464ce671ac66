"""The id service's JSON/UDP codec: requests, golden replies, the 256-byte bound, junk."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from haqueue.protocol import idjson
from haqueue.protocol.idjson import BadRequest, GetId, Monitor


def req(**fields) -> bytes:
    return json.dumps(fields).encode()


GET = req(action="get", rule_name="o2o", app_name="test")


def test_the_seed_request_shapes_parse():
    assert idjson.parse(GET) == GetId("get", "o2o", "test")
    assert idjson.parse(req(action="create", rule_name="o2o", app_name="test", seq="17")) == \
        GetId("create", "o2o", "test", None, "17")
    assert idjson.parse(req(action="monitor", rule_name="o2o", app_name="test", seq=3)) == \
        Monitor("o2o", "test", 3)
    assert idjson.parse(req(action="get", rule_name="r", app_name="a", salt="ab12", extra=[1])) == \
        GetId("get", "r", "a", "ab12")


def test_smallest_valid_request_is_47_bytes_and_shorter_is_silence():
    smallest = b'{"action":"get","rule_name":"x","app_name":"y"}'
    assert len(smallest) == idjson.MIN_REQUEST == 47
    assert idjson.parse(smallest) == GetId("get", "x", "y")
    assert idjson.parse(smallest[:-1]) is None
    assert idjson.parse(b'{"action":"get","rule_name":"","app_name":""}') is None  # 46 bytes


def test_oversized_datagram_is_silence():
    padded = req(action="get", rule_name="o2o", app_name="test", pad="x" * 1400)
    assert idjson.parse(padded) is None
    at_limit = req(action="get", rule_name="o2o", app_name="test", pad="")
    at_limit = at_limit[:-1] + b" " * (idjson.MAX_REQUEST - len(at_limit)) + b"}"
    assert len(at_limit) == idjson.MAX_REQUEST
    assert idjson.parse(at_limit) == GetId("get", "o2o", "test")
    assert idjson.parse(at_limit[:-1] + b" }") is None


@pytest.mark.parametrize("junk", [
    b"x" * 60,
    b"[" + b'"action","get","rule_name","o2o","app_name","test"' + b"]",
    b'"' + b"a" * 60 + b'"',
    b'{"action":"get","rule_name":"o2o","app_name":"test"',  # truncated
    b'{"action":"get","rule_name":"o2o","app_name":"te\xff\xfe"}',  # not UTF-8
    b'{"action":"get","rule_name":"o2o","app_name":"test","seq":NaN}',
    b'{"action":"get","rule_name":"o2o","app_name":"test","n":Infinity}',
    b"[" * 700 + b"]" * 700,
    b"\x00" * 100,
])
def test_bytes_that_are_not_a_json_object_get_no_reply(junk):
    assert idjson.parse(junk) is None


@pytest.mark.parametrize("fields, error, message", [
    ({"rule_name": "o2o", "app_name": "test", "pad": "xxxxxxxxxx"}, "bad_request", "need action"),
    ({"action": 1, "rule_name": "o2o", "app_name": "test"}, "bad_request", "need action"),
    ({"action": "delete", "rule_name": "o2o", "app_name": "test"}, "unknown_action", "unknown action"),
    ({"action": "get", "app_name": "test", "pad": "xxxxxxxxxxxxxxx"}, "bad_request", "need rule_name"),
    ({"action": "get", "rule_name": 5, "app_name": "test"}, "bad_request", "bad rule_name"),
    ({"action": "get", "rule_name": "", "app_name": "test"}, "bad_request", "bad rule_name"),
    ({"action": "get", "rule_name": "r" * 65, "app_name": "test"}, "bad_request", "bad rule_name"),
    ({"action": "get", "rule_name": "o2o", "pad": "xxxxxxxxxxxxxxxxxxx"}, "bad_request", "need app_name"),
    ({"action": "get", "rule_name": "o2o", "app_name": ["t"]}, "bad_request", "bad app_name"),
    ({"action": "get", "rule_name": "o2o", "app_name": "a" * 65}, "bad_request", "bad app_name"),
    ({"action": "get", "rule_name": "o2o", "app_name": "te\ud800st"}, "bad_request", "bad app_name"),
    ({"action": "get", "rule_name": "o2o", "app_name": "t", "salt": 5}, "bad_request", "bad salt"),
    ({"action": "get", "rule_name": "o2o", "app_name": "t", "salt": "s" * 65}, "bad_request", "bad salt"),
    ({"action": "get", "rule_name": "o2o", "app_name": "test", "seq": [1]}, "bad_request", "bad seq"),
    ({"action": "get", "rule_name": "o2o", "app_name": "test", "seq": "s" * 63}, "bad_request", "bad seq"),
])
def test_every_field_rule_has_its_error(fields, error, message):
    parsed = idjson.parse(req(**fields))
    assert isinstance(parsed, BadRequest)
    assert (parsed.error, parsed.message) == (error, message)
    reply = json.loads(idjson.bad_request(parsed))
    assert reply["code"] == -1 and reply["error"] == error and reply["message"] == message


@pytest.mark.parametrize("byte", [*range(33), 127, *b"!\"#%&'<>\\"])
def test_app_name_refuses_each_forbidden_byte(byte):
    app = "ab" + chr(byte) + "cd"
    parsed = idjson.parse(req(action="get", rule_name="o2o", app_name=app))
    assert parsed == BadRequest("bad_request", "bad app_name")


def test_app_name_takes_64_bytes_of_utf8_and_allowed_punctuation():
    assert idjson.parse(req(action="get", rule_name="o2o", app_name="é" * 32)).app == "é" * 32
    assert isinstance(idjson.parse(req(action="get", rule_name="o2o", app_name="é" * 33)), BadRequest)
    assert idjson.parse(req(action="get", rule_name="o2o", app_name="a-b_c.d$e/f")).app == "a-b_c.d$e/f"


def test_golden_success_reply():
    request = idjson.parse(req(action="get", rule_name="o2o", app_name="test", seq="17"))
    assert idjson.success(request, "505140001") == (
        b'{"code":0,"message":"success","data":"505140001","seq":"17",'
        b'"action":"get","rule_name":"o2o","app_name":"test"}')
    plain = idjson.parse(GET)
    assert idjson.success(plain, "505140001") == (
        b'{"code":0,"message":"success","data":"505140001","action":"get","rule_name":"o2o","app_name":"test"}')


def test_golden_error_and_monitor_replies():
    request = idjson.parse(req(action="get", rule_name="nope", app_name="test", seq=4))
    assert idjson.unknown_rule(request) == (
        b'{"code":-1,"message":"unknown rule","error":"unknown_rule","seq":4,'
        b'"action":"get","rule_name":"nope","app_name":"test"}')
    assert json.loads(idjson.not_leader(request, "10.0.0.2:1200"))["leader"] == "10.0.0.2:1200"
    assert json.loads(idjson.too_many_apps(request))["error"] == "too_many_apps"
    monitor = idjson.parse(req(action="monitor", rule_name="o2o", app_name="test"))
    assert json.loads(idjson.not_exist(monitor)) == {
        "code": -1, "message": "not exist", "error": "not_exist",
        "action": "monitor", "rule_name": "o2o", "app_name": "test"}
    assert idjson.monitor_reply(monitor, {"counter": 3, "node_offset": 0}) == (
        b'{"code":0,"message":"ok","data":{"counter":3,"node_offset":0},'
        b'"action":"monitor","rule_name":"o2o","app_name":"test"}')


def test_exhausted_names_the_end_of_the_cycle_in_the_rules_zone():
    request = idjson.parse(GET)
    # 2026-11-23T00:00:00+08:00 == 2026-11-22T16:00:00Z
    reply = json.loads(idjson.exhausted(request, 1_795_363_200_000, 8 * 3600))
    assert reply["code"] == -1 and reply["error"] == "exhausted"
    assert reply["message"] == "counter exhausted until 2026-11-23T00:00:00+08:00"
    assert json.loads(idjson.exhausted(request, None))["message"] == "counter exhausted"


def test_replies_stay_within_256_bytes_dropping_echoes_in_order():
    long_seq = "s" * 62  # 64 bytes serialized: the largest seq accepted
    request = idjson.parse(req(action="create", rule_name="r" * 64, app_name="a" * 64, salt="z" * 64,
                               seq=long_seq))
    assert isinstance(request, GetId)
    reply = idjson.success(request, "9" * 64)
    assert len(reply) <= idjson.MAX_REPLY
    decoded = json.loads(reply)
    assert decoded["data"] == "9" * 64 and decoded["seq"] == long_seq and decoded["code"] == 0
    assert "action" in decoded and "app_name" not in decoded and "salt" not in decoded
    # Echoes stop at the first that does not fit: never app_name without rule_name.
    assert list(decoded)[-1] in ("action", "rule_name")
    for build in (idjson.unknown_rule, idjson.too_many_apps, idjson.not_exist,
                  lambda r: idjson.not_leader(r, "x" * 64), lambda r: idjson.exhausted(r, 2**41, -12 * 3600)):
        assert len(build(request)) <= idjson.MAX_REPLY
    monitor = idjson.parse(req(action="monitor", rule_name="r" * 64, app_name="a" * 64, seq=long_seq))
    big = {"counter": 2**63 - 1, "node_offset": 0, "mode": "exact", "remaining": 2**63 - 1,
           "cycle_end_ms": 2**45, "more": "m" * 60}
    reply = idjson.monitor_reply(monitor, big)
    assert len(reply) <= idjson.MAX_REPLY
    assert json.loads(reply)["data"]["counter"] == 2**63 - 1


def test_salt_fits_only_rules_that_take_one():
    assert idjson.salt_fits(None, 0) and idjson.salt_fits("", 0)
    assert not idjson.salt_fits("ab", 0)
    assert idjson.salt_fits("aB9", 3)
    assert not idjson.salt_fits("aB9x", 3)
    assert not idjson.salt_fits("a-b", 8)
    assert not idjson.salt_fits("é", 8)


def test_http_form_uses_the_same_field_rules():
    assert idjson.check_fields("get", "o2o", "test") == GetId("get", "o2o", "test")
    assert idjson.check_fields("get", "o2o", "te st") == BadRequest("bad_request", "bad app_name")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=80),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=1500))
def test_parse_never_raises_on_bytes(data):
    result = idjson.parse(data)
    assert result is None or isinstance(result, (GetId, Monitor, BadRequest))


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "action": st.sampled_from(["get", "create", "monitor", "other"]) | json_values,
    "rule_name": st.text(max_size=70) | json_values,
    "app_name": st.text(max_size=70) | json_values,
    "salt": st.text(max_size=70) | json_values,
    "seq": json_values,
}), st.text(max_size=200))
def test_parse_never_raises_and_every_reply_fits(fields, pad):
    data = json.dumps({**fields, "pad": pad}).encode()
    result = idjson.parse(data)
    if result is None:
        assert not idjson.MIN_REQUEST <= len(data) <= idjson.MAX_REQUEST
        return
    if isinstance(result, BadRequest):
        replies = [idjson.bad_request(result)]
    elif isinstance(result, Monitor):
        replies = [idjson.not_exist(result), idjson.monitor_reply(result, {"counter": 1, "node_offset": 0})]
    else:
        replies = [idjson.success(result, "1" * 64), idjson.unknown_rule(result),
                   idjson.exhausted(result, 10**15, 3600), idjson.not_leader(result, "127.0.0.1:1200")]
    for reply in replies:
        assert len(reply) <= idjson.MAX_REPLY
        assert type(json.loads(reply)) is dict


@settings(max_examples=400, deadline=None)
@given(st.builds(GetId, st.sampled_from(["get", "create"]), st.text(min_size=1, max_size=64),
                 st.text(min_size=1, max_size=64), st.none() | st.text(max_size=64),
                 st.just(idjson.NO_SEQ) | st.none() | st.integers(-10**15, 10**15) | st.text(max_size=20)),
       st.text(min_size=1, max_size=64))
def test_a_success_reply_is_the_same_bytes_from_its_cached_frame(request, id_text):
    # success() wraps a plain id in a frame cached per request and id length;
    # it must be byte for byte what building the reply field by field gives.
    built = idjson._bounded([*idjson._SUCCESS_HEAD, b'"data":' + idjson._dumps(id_text)], request)
    assert idjson.success(request, id_text) == built
    assert json.loads(built)["data"] == id_text


def test_the_same_datagram_parses_to_the_same_request_once():
    datagram = json.dumps({"action": "get", "rule_name": "o2o", "app_name": "cached"}).encode()
    before = idjson.parse.cache_info().hits
    first, second = idjson.parse(datagram), idjson.parse(bytes(datagram))
    assert first == GetId("get", "o2o", "cached") and second is first
    assert idjson.parse.cache_info().hits == before + 1
    assert idjson.parse.cache_info().maxsize == 1024  # bounded: junk only evicts
