"""FastAPI and conveyor in one module (docs/how-to/fastapi.md).

    uvicorn fastapi_app:api                  # the web app (from this folder)
    conveyor worker fastapi_app:app          # a worker, in another terminal

The store comes from ``CONVEYOR_URL`` (default ``sqlite:///./conveyor.db``).
The lifespan opens the app's store when the web app starts and closes it when
it stops; a dependency enqueues; an endpoint waits for a job's result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel, Field

from conveyor import Conveyor, Job, JobCancelled, JobContext, JobFailed

app = Conveyor()


@app.task("reports.build", queue="reports", attempts=3, timeout=60)
async def build_report(ctx: JobContext, customer: str, months: int) -> dict[str, Any]:
    if months > 120:
        raise ValueError(f"{months} months is more history than we keep")
    await ctx.progress(100, phase="done")
    return {"customer": customer, "months": months, "rows": months * 30}


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    await app.connect()  # a bad URL or an unreachable store fails the start, not a request
    try:
        yield
    finally:
        await app.close()


api = FastAPI(title="reports", lifespan=lifespan)


def get_conveyor() -> Conveyor:
    """The app as a dependency: a test can swap it (``api.dependency_overrides``)."""
    return app


Jobs = Annotated[Conveyor, Depends(get_conveyor)]


class ReportRequest(BaseModel):
    customer: str = Field(min_length=1)
    months: int = Field(default=12, ge=1)


async def enqueue_report(request: ReportRequest, conveyor: Jobs) -> Job:
    """A dependency that enqueues: the endpoint receives the stored job. The
    idempotency key makes a client's retry of the same request one job."""
    return await conveyor.enqueue(
        "reports.build",
        request.model_dump(),
        idempotency_key=f"report:{request.customer}:{request.months}",
    )


async def existing_job(job_id: str, conveyor: Jobs) -> Job:
    job = await conveyor.get_job(job_id)
    if job is None or job.task != "reports.build":
        raise HTTPException(status_code=404, detail=f"no report job {job_id}")
    return job


@api.post("/reports", status_code=202)
async def create_report(job: Annotated[Job, Depends(enqueue_report)]) -> dict[str, Any]:
    return {"job_id": job.id, "state": job.state.value, "duplicate": job.duplicate}


@api.get("/reports/{job_id}")
async def report_status(job: Annotated[Job, Depends(existing_job)]) -> dict[str, Any]:
    return {"job_id": job.id, "state": job.state.value, "progress": job.progress}


@api.get("/reports/{job_id}/result")
async def report_result(
    job: Annotated[Job, Depends(existing_job)], timeout: float = 10.0
) -> dict[str, Any]:
    """Wait up to ``timeout`` seconds for the job; 504 if it is still running."""
    try:
        result = await job.wait(timeout=min(timeout, 30.0))
    except TimeoutError:
        raise HTTPException(status_code=504, detail="the report is not ready yet") from None
    except (JobFailed, JobCancelled) as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from None
    return {"job_id": job.id, "result": result}
