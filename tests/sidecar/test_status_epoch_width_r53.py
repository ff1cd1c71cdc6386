"""The status epochs table keeps its columns for any epoch number (up to 536,870,910, the
largest a far cut may make): a 9-digit epoch pushed its row's numbers out from under the header."""

from __future__ import annotations

from epochfs.sidecar.status_lines import epoch_lines


def test_columns_line_up_for_a_nine_digit_epoch() -> None:
    rows = [{"epoch": 9, "samples": 20014, "new": 0, "evicted": 0, "bytes": 641024},
            {"epoch": 536870909, "samples": 20014, "new": 0, "evicted": 0, "bytes": 641024}]
    header, first, second = epoch_lines(rows)[:3]
    shown = "\n".join((header, first, second))
    assert len(header) == len(first) == len(second), shown
    samples_end = header.index("samples") + len("samples")
    for row in (first, second):
        assert row.index("20014") + len("20014") == samples_end, shown
        assert row.startswith(" ") or row.split()[0] == "536870909", shown
