"""The spawn path's pool (rnnfleet.runner.spawned.Pool) hands out workers by its rules, on
workers that stand in for spawned processes: same folder, environment and sys.path; the last
job's target first; a worker that started CUDA trains only."""

from __future__ import annotations

from types import SimpleNamespace

from rnnfleet.runner.spawned import Pool, Worker, spawn_key

TRAIN, PREPROCESS = "rnnfleet.runner.jobs:train_job", "rnnfleet.runner.jobs:preprocess_job"


def request(target: str, marker: str = "m") -> dict:
    return {"target": target, "cwd": "/work", "env": {"MARKER": marker}, "sys_path": ["/scripts"]}


def pool_of(*workers: Worker) -> Pool:
    pool = Pool()
    pool.workers = list(workers)
    pool.keep_spares = lambda: None  # no real process is started here
    return pool


def worker(takes: str | None, last_target: str = "", holds_cuda: bool = False) -> Worker:
    alive = SimpleNamespace(is_alive=lambda: True)
    channel = SimpleNamespace(close=lambda: None)
    return Worker(process=alive, channel=channel, takes=takes, last_target=last_target, holds_cuda=holds_cuda)


def test_a_worker_that_started_cuda_takes_trainings_only_and_the_last_target_goes_first():
    key = spawn_key(request(PREPROCESS))
    assert key == spawn_key(request(TRAIN)) != spawn_key(request(TRAIN, marker="other"))
    trainer = worker(key, TRAIN, holds_cuda=True)
    preprocessor = worker(key, PREPROCESS)
    pool = pool_of(trainer, preprocessor)
    assert pool.take(key, TRAIN) is trainer  # its imports and context are a training's
    assert pool.take(key, TRAIN) is preprocessor  # no CUDA yet: it may become a trainer
    pool.give_back(trainer, {"takes_more": True, "holds_cuda": True})
    pool.give_back(preprocessor, {"takes_more": True, "holds_cuda": False})
    taken = pool.take(key, PREPROCESS)
    assert taken is preprocessor  # never the worker holding a context
    pool.give_back(taken, {"takes_more": False})  # a failed job: the worker is let go
    assert pool.workers == [trainer]


def test_a_spare_is_taken_before_a_new_worker_and_another_environment_never_shares_one():
    key, other = spawn_key(request(TRAIN)), spawn_key(request(TRAIN, marker="other"))
    busy_elsewhere = worker(other, TRAIN)
    spare = worker(None)
    pool = pool_of(busy_elsewhere, spare)
    assert pool.take(key, TRAIN) is spare and spare.takes == key
