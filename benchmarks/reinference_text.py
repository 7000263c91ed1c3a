"""Re-inference's carried text: what one streamed answer of N pieces costs the Coordinator's tracker,
against appending each piece to one string attribute (what the tracker did before it kept pieces).

    .venv/bin/python -m benchmarks.reinference_text [--pieces 10000,40000] [--piece-chars 4]

Appending to an attribute copies the whole text on every piece (CPython's in-place concatenation
applies to local variables only), so four times the pieces cost about sixteen times as long; the
tracker's list of pieces grows linearly. Printed: seconds per run and the 4x-pieces ratio of each.
"""

from __future__ import annotations

import argparse
import time

from motor.coordinator.reinference import StreamTracker, plan_stream


class _Attribute:
    text = ""


def appended_to_a_string(pieces: list[str]) -> float:
    holder = _Attribute()
    started = time.perf_counter()
    for piece in pieces:
        holder.text += piece
    return time.perf_counter() - started


def kept_by_the_tracker(pieces: list[str]) -> float:
    plan = plan_stream("/v1/completions", {"prompt": "p", "stream": True}, max_carried_length=1 << 30,
                       carry_token_ids=False)
    assert not isinstance(plan, str), plan
    tracker = StreamTracker(plan, 1 << 30)
    started = time.perf_counter()
    for piece in pieces:
        tracker.pieces.append(piece)
        tracker.text_length += len(piece)
    assert len(tracker.text) == sum(map(len, pieces))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pieces", default="10000,40000")
    parser.add_argument("--piece-chars", type=int, default=4)
    args = parser.parse_args()
    counts = [int(n) for n in args.pieces.split(",")]
    for label, measure in (("str +=", appended_to_a_string), ("tracker pieces", kept_by_the_tracker)):
        times = [min(measure(["abcd"[: args.piece_chars]] * n) for _ in range(3)) for n in counts]
        row = "  ".join(f"{n} pieces {t:.4f}s" for n, t in zip(counts, times, strict=True))
        print(f"{label:15s} {row}  ratio {times[-1] / max(times[0], 1e-9):.1f}x")


if __name__ == "__main__":
    main()
