"""The client report's body and query: what ``POST /v1/client-report`` accepts, validated.

Its own module because it is the one request whose content comes from another program (the torch
client) and is parsed as JSON: the rules for it (flat object, known fields, non-negative numbers,
a bounded nesting depth checked before parsing) are read and changed apart from the HTTP framing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from epochfs.torchclient.layout import parse_epoch_name

CLIENT_REPORT_PATH = "/v1/client-report"
MAX_REPORT_BYTES = 4096
MAX_JSON_DEPTH = 4
"""A report is one flat object (depth 1); deeper JSON is refused before it is parsed."""
MAX_REPORT_EPOCHS = 8
"""Epochs one report may name as in use (a rank reads one; a few more for a pipeline)."""
CLIENT_ID = re.compile(r"[0-9a-f]{1,32}")
"""A reporter's id (the torch client sends 16 hex digits): short and plain, since the sidecar keeps
one entry per client it heard from (:data:`epochfs.sidecar.served_pins.MAX_CLIENTS` at most)."""


@dataclass(frozen=True)
class ClientReport:
    """One validated report from the torch client (all increments, never negative)."""

    samples: int
    nbytes: int
    wait_seconds: float
    epochs: tuple[int, ...] = ()
    """Epochs the client reads now (from the query), which stay pinned while it names them."""
    client: str | None = None
    """The reporter naming them (``client=<id>`` in the query): a later report of the same client
    that no longer names an epoch releases it (:mod:`epochfs.sidecar.served_pins`). None from an
    older client, whose named epochs are dated a heartbeat ahead instead."""

    @staticmethod
    def parse_query(query: str) -> tuple[tuple[int, ...], str | None]:
        """``epoch=3&epoch=4&client=ab12`` -> ((3, 4), "ab12"); ValueError for anything else."""
        if not query:
            return (), None
        found: list[int] = []
        client: str | None = None
        for item in query.split("&"):
            name, sep, value = item.partition("=")
            if name == "client" and sep and client is None and CLIENT_ID.fullmatch(value):
                client = value
                continue
            n = parse_epoch_name("epoch-" + value) if name == "epoch" and sep else None
            if n is None:
                raise ValueError(f"the query may only name epochs (epoch=N) and the client once "
                                 f"(client=<hex id>), got {item[:40]!r}")
            found.append(n)
        if len(found) > MAX_REPORT_EPOCHS:
            raise ValueError(f"at most {MAX_REPORT_EPOCHS} epochs per report")
        return tuple(sorted(set(found))), client

    @classmethod
    def parse(cls, body: bytes) -> ClientReport:
        """Validate a JSON report; ValueError says what is wrong."""
        if json_depth(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"not JSON: {e}") from None
        except RecursionError:  # json_depth missed it (an exotic encoding): still a clean refusal
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(doc, dict):
            raise ValueError("expected a JSON object")
        unknown = set(doc) - {"samples", "bytes", "wait_seconds"}
        if unknown:
            raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
        samples, nbytes, wait = doc.get("samples", 0), doc.get("bytes", 0), doc.get("wait_seconds", 0.0)
        for name, value, kinds in (("samples", samples, (int,)), ("bytes", nbytes, (int,)),
                                   ("wait_seconds", wait, (int, float))):
            if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
                raise ValueError(f"{name}: must be a non-negative number")
            if value != value or value > 1e15:  # NaN or absurd
                raise ValueError(f"{name}: out of range")
        return cls(samples=int(samples), nbytes=int(nbytes), wait_seconds=float(wait))


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.DOTALL)  # an unterminated one runs to the end
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth(body: bytes, limit: int) -> int:
    """The nesting depth of the JSON text ``body`` (brackets outside strings), counted no further
    than ``limit + 1``: cheap and never recursive, so a hostile body cannot exhaust the stack."""
    depth = peak = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub(b"", body)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > peak:
                peak = depth
                if peak > limit:
                    break
        else:
            depth -= 1
    return peak
