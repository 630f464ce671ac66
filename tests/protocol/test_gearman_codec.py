"""The Gearman codec (haqueue/protocol/gearman.py): whole, byte by byte, with trailing data.

Packet layouts from seed 002 (the protocol document) and gearmand's table for 37-42; the
golden bytes are written out by hand from the document's header description.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from haqueue.protocol import gearman as G


def events(decoder: G.GearmanDecoder) -> list:
    out = []
    while (event := decoder.next_event()) is not G.NEED_DATA:
        out.append(event)
    return out


def decode(data: bytes, chunk: int | None = None, **kwargs) -> list:
    decoder = G.GearmanDecoder(**kwargs)
    out = []
    step = chunk or max(1, len(data))
    for i in range(0, len(data), step):
        decoder.receive_data(data[i:i + step])
        out += events(decoder)
    return out


def test_a_submit_job_packet_has_the_documented_bytes():
    packet = G.request("SUBMIT_JOB", b"reverse", b"uniq-1", b"hello\0world")
    data = b"reverse\0uniq-1\0hello\0world"
    assert packet == b"\0REQ" + b"\0\0\0\x07" + b"\0\0\0\x1a" + data and len(data) == 0x1a
    assert decode(packet) == [G.Packet(G.REQ, 7, (b"reverse", b"uniq-1", b"hello\0world"))]


def test_every_packet_type_round_trips_whole_and_byte_by_byte():
    stream, expected = b"", []
    for number, (name, fields) in sorted(G.PACKETS.items()):
        args = tuple(b"a%d" % i for i in range(fields - 1)) + ((b"last\0with nul",) if fields else ())
        stream += G.encode(G.REQ, number, *args)
        expected.append(G.Packet(G.REQ, number, args))
    assert decode(stream) == expected
    assert decode(stream, chunk=1) == expected
    assert [p.name for p in expected][:3] == ["CAN_DO", "CANT_DO", "RESET_ABILITIES"]


def test_a_packet_followed_by_part_of_the_next_waits_for_the_rest():
    echo = G.request("ECHO_REQ", b"ping")
    decoder = G.GearmanDecoder()
    decoder.receive_data(echo + echo[:5])
    assert events(decoder) == [G.Packet(G.REQ, 16, (b"ping",))]
    assert decoder.buffered == 5
    decoder.receive_data(echo[5:])
    assert events(decoder) == [G.Packet(G.REQ, 16, (b"ping",))]


def test_admin_lines_and_packets_interleave_decided_by_the_first_byte():
    stream = b"status\r\n" + G.request("GRAB_JOB") + b"workers\n"
    expected = [G.AdminLine(b"status"), G.Packet(G.REQ, 9, ()), G.AdminLine(b"workers")]
    assert decode(stream) == expected
    assert decode(stream, chunk=1) == expected


@pytest.mark.parametrize("data, reason, answered", [
    (b"\0XYZ", "bad magic", False),  # not Gearman: gearmand closes without a word
    (b"\0REQ" + struct.pack(">II", 0, 0), "unknown packet type 0", False),
    (b"\0REQ" + struct.pack(">II", 43, 3) + b"abc", "unknown packet type 43", False),
    (b"\0REQ" + struct.pack(">II", 99, 3) + b"abc", "unknown packet type 99", False),
    (b"\0REQ" + struct.pack(">II", 16, 1 << 30), "packet of 1073741824 bytes, more than", True),
    (b"x" * G.MAX_LINE, "admin line longer than 8192 bytes", True),
])
def test_input_that_loses_the_framing_is_a_fatal_error_and_nothing_after_it_is_read(data, reason, answered):
    decoder = G.GearmanDecoder()
    decoder.receive_data(data)
    (event,) = events(decoder)
    assert isinstance(event, G.ProtocolError) and event.fatal and reason in event.reason
    assert event.answered == answered
    decoder.receive_data(G.request("ECHO_REQ", b"after"))
    assert events(decoder) == [] and decoder.buffered == 0  # nothing held either


def test_an_oversized_packet_is_refused_from_its_header_before_its_data_arrives():
    decoder = G.GearmanDecoder(max_packet=1024)
    decoder.receive_data(b"\0REQ" + struct.pack(">II", 7, 1025))
    (event,) = events(decoder)
    assert event.fatal and "1025 bytes" in event.reason


@pytest.mark.parametrize("data, reason, code, text", [
    (b"\0RES" + struct.pack(">II", 16, 1) + b"x", "bad magic b'\\x00RES'", b"INVALID_MAGIC",
     b"Request magic expected"),  # a response's magic: gearmand answers and reads on
    (b"\0REQ" + struct.pack(">II", 5, 0), "unassigned packet type 5", b"INVALID_COMMAND",
     b"Command not expected"),
    (b"\0REQ" + struct.pack(">II", 7, 4) + b"f\0ab", "SUBMIT_JOB takes 3 arguments, got 2",
     b"INVALID_COMMAND", None),
    (b"\0REQ" + struct.pack(">II", 9, 2) + b"xx", "GRAB_JOB takes no arguments, got 2 bytes",
     b"INVALID_COMMAND", None),
])
def test_a_well_framed_bad_packet_is_an_error_the_stream_survives(data, reason, code, text):
    (event, after) = decode(data + G.request("ECHO_REQ", b"ok"))
    assert isinstance(event, G.ProtocolError) and not event.fatal and reason in event.reason
    assert (event.code, event.error_text) == (code, text or reason.encode()) and event.answered
    assert after == G.Packet(G.REQ, 16, (b"ok",))


def test_encode_refuses_the_wrong_number_of_arguments_and_nul_inside_a_field():
    with pytest.raises(ValueError, match="SUBMIT_JOB takes 3 argument"):
        G.request("SUBMIT_JOB", b"f", b"u")
    with pytest.raises(ValueError, match="only the last argument"):
        G.request("SUBMIT_JOB", b"f\0", b"u", b"data")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 40))
def test_the_decoder_never_raises_and_chunking_never_changes_what_it_sees(data, chunk):
    assert decode(data, max_packet=256) == decode(data, chunk=chunk, max_packet=256)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(G.PACKETS)), st.lists(st.binary(max_size=20), max_size=8)),
                max_size=10), st.integers(1, 30))
def test_any_sequence_of_packets_decodes_to_itself(specs, chunk):
    stream, expected = b"", []
    for number, pool in specs:
        fields = G.PACKETS[number][1]
        values = [v.replace(b"\0", b"") for v in pool] + [b""] * fields
        args = tuple(values[:fields - 1]) + ((pool[-1] if pool else b"",)) if fields else ()
        stream += G.encode(G.REQ, number, *args)
        expected.append(G.Packet(G.REQ, number, args))
    assert decode(stream, chunk=chunk) == expected


def test_a_stopped_decoder_drops_what_it_holds_and_what_arrives():
    decoder = G.GearmanDecoder()
    decoder.receive_data(G.request("ECHO_REQ", b"held"))
    decoder.stop()
    decoder.receive_data(G.request("ECHO_REQ", b"later"))
    assert events(decoder) == [] and decoder.buffered == 0


def test_request_size_is_the_packet_being_received_from_its_header_to_its_last_byte():
    packet = G.request("SUBMIT_JOB", b"reverse", b"", b"x" * 100_000)
    decoder = G.GearmanDecoder()
    decoder.receive_data(packet[:5])
    assert decoder.request_size == 0  # no whole header yet
    decoder.receive_data(packet[5:50])
    assert decoder.request_size == len(packet)
    assert events(decoder) == []
    decoder.receive_data(packet[50:])
    assert decoder.request_size == 0  # all here
    assert len(events(decoder)) == 1
    decoder.receive_data(b"status\n"[:3])
    assert decoder.request_size == 0  # an admin line is bounded by MAX_LINE instead
