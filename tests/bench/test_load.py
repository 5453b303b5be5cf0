"""bench.load's figures: the server's CPU time per request, beside the page times."""

from __future__ import annotations

import os
import time

from bench import load


def test_it_reads_a_processs_cpu_time_from_proc():
    before = load.cpu_seconds(os.getpid())
    spent = time.process_time()
    while time.process_time() - spent < 0.3:  # busy: CPU time, not waiting
        pass
    after = load.cpu_seconds(os.getpid())
    # Clock ticks are 10 ms: the 0.3 s spent show, give or take a tick.
    assert 0.25 <= after - before <= 1.0
    assert load.cpu_seconds() >= after


def result(**changes):
    page = {"type": "GET", "failures": 0, "p50_ms": 100.0}
    return {
        "seconds": 60,
        "users": 50,
        "rate": 10.0,
        "pages": [
            {**page, "name": "inbox", "requests": 300, "p95_ms": 700.0},
            {**page, "name": "runs list", "requests": 150, "p95_ms": 800.0},
            {**page, "type": "POST", "name": "approve (POST)", "requests": 50, "p95_ms": 900.0},
            {**page, "type": "websocket", "name": "connect", "requests": 50, "p95_ms": 5.0},
        ],
        "requests": 550,
        "failures": 0,
        "why": [],
        "live_ms": [40.0, 60.0],
        "event_ms": [40.0, 260.0],
        "events_unshown": 0,
        "frames": 2,
        "submitted": 600,
        "runs": {"completed": 500},
        "server_rss_mb": 150.0,
        "worker_rss_mb": 130.0,
        "server_cpu_s": 12.5,
        **changes,
    }


def test_it_reports_the_servers_cpu_ms_per_page_request_beside_the_page_p95():
    text, _ = load.report(result())
    # 12.5 s of CPU over the 500 pages and posts (the websocket connects are not requests).
    assert "Server CPU: 25.0 ms per request (12.5 s for 500 pages and posts)" in text
    assert "ms per request (12.5 s for 500 pages and posts), page p95 worst 900 ms" in text


def test_an_events_wait_is_to_the_first_frame_of_each_socket_that_shows_it():
    frames = [
        (100.0, 0, 1),  # socket 1 opens
        (100.5, 0, 2),  # socket 2 opens
        (101.2, 11, 1),
        (101.9, 12, 1),  # shows 12, and 11 again: only the first frame counts for 11
        (102.0, 12, 2),
    ]
    events = [(10, 99.0), (11, 101.0), (12, 101.5), (13, 101.8)]
    waits, unshown = load.event_waits(frames, events)
    # 10 committed before either socket opened; 13 no frame showed; 11 and 12 on both sockets
    # (socket 2 met 11 only in its frame showing 12).
    assert sorted(round(w) for w in waits) == [200, 400, 500, 1000]
    assert unshown == 2


def test_it_reports_the_wait_of_every_event_beside_the_frames_freshness():
    text, _ = load.report(result())
    assert "live: commit -> first frame showing it" in text
    assert "0 events a socket had not shown by the end" in text
