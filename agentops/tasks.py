"""Celery tasks: an interface to the runtime that passes ids and decides nothing.

Delivery is at least once (acks_late, requeued when the worker dies, one message prefetched at a
time), so a run id can be delivered twice, late, or to two workers at once. That is safe because
the runtime's claim decides who works: a delivery whose run is claimed, finished or not runnable
returns without writing anything.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import connections

from runtime import bulk, control, engine, faults

log = logging.getLogger(__name__)


@shared_task(
    name="agentops.advance_run",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def advance_run(run_id: str) -> bool:
    """Advance one run as far as it goes; False when it was not claimable (nothing written)."""
    advanced = engine.advance(run_id)
    log.info("run %s: %s", run_id, "advanced" if advanced else "not claimable, nothing done")
    # The work is committed and the broker not yet told: a crash here means a redelivery.
    faults.reach("before_ack", run_id, "", "advance_run")
    return advanced


def enqueue(run_id: str) -> None:
    """The AGENTOPS_DISPATCH hook: hand a committed, runnable run to a worker.

    Called after commit. If the broker is unreachable the message is lost; the sweep finds the
    run in the database and hands it over again.
    """
    advance_run.delay(str(run_id))


@shared_task(
    name="agentops.work_bulk_job",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def work_bulk_job(job_id: str) -> int:
    """Work a bulk job's batches; 0 when another worker holds it (nothing written)."""
    marked = bulk.work(job_id, owner=engine.worker_name())
    log.info("bulk job %s: %d item(s) marked", job_id, marked)
    return marked


def enqueue_bulk_job(job_id: str) -> None:
    """The AGENTOPS_BULK_DISPATCH hook: hand a committed bulk job to a worker. A lost message
    is found again by the sweep (a running job no worker holds)."""
    work_bulk_job.delay(str(job_id))


def sweep(reason: str = "sweep") -> list[str]:
    """Hand every run that can move now to the workers: startup discovery and the periodic sweep.

    Never raises: a failed sweep (database or broker down) is logged and the next one retries.
    Holds no database connection between sweeps: in a prefork worker's parent that keeps a
    connection from being inherited by the children it forks.
    """
    try:
        handed = control.resume()
        for job_id in bulk.stalled_job_ids():
            enqueue_bulk_job(job_id)
    except Exception:
        log.exception("%s: failed; the next sweep tries again", reason)
        return []
    finally:
        connections.close_all()
    if handed:
        log.info(
            "%s: handed %d run(s) to the workers: %s", reason, len(handed), " ".join(handed[:20])
        )
    return handed


__all__ = ["advance_run", "enqueue", "enqueue_bulk_job", "sweep", "work_bulk_job"]
