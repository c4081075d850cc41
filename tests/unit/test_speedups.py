"""rnnfleet.hooks.snakemake_speedups in this process: each replacement does what it says. Its
gate (the supported release, the stock source): tests/unit/test_snakemake_contract.py. That
Snakemake plans the same jobs with it (real runs): tests/workflow/test_speedups_run.py."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from rnnfleet.hooks import snakemake_speedups


class CountingPath(str):
    """An input file as the scheduler sees it, counting the stat calls made on it."""

    calls = 0

    async def exists(self):
        CountingPath.calls += 1
        return True

    async def size(self):
        CountingPath.calls += 1
        return 100


def test_update_input_sizes_stats_only_paths_not_sized_yet():
    scheduler = SimpleNamespace(_input_sizes={})
    ready = [SimpleNamespace(input=[CountingPath(f"prep/{n}.npz")]) for n in range(50)]
    asyncio.run(snakemake_speedups.update_input_sizes(scheduler, ready))
    assert CountingPath.calls == 100 and len(scheduler._input_sizes) == 50
    # Another job finished, one new job became ready: only its input is stat'ed.
    ready.append(SimpleNamespace(input=[CountingPath("prep/new.npz")]))
    asyncio.run(snakemake_speedups.update_input_sizes(scheduler, ready[1:]))
    assert CountingPath.calls == 102 and scheduler._input_sizes[CountingPath("prep/new.npz")] == 100


def test_scheduling_rounds_asked_for_while_one_is_pending_start_no_timer():
    scheduler = SimpleNamespace(_open_jobs=threading.Semaphore(0))
    for _ in range(20):  # twenty rounds in a row, each asking for a re-evaluation
        snakemake_speedups.schedule_reevaluation(scheduler, 0.05)
    assert scheduler._open_jobs.acquire(timeout=5)  # one round comes
    assert not scheduler._open_jobs.acquire(timeout=0.3)  # and only one
    snakemake_speedups.schedule_reevaluation(scheduler, 0.05)  # that round may ask again
    assert scheduler._open_jobs.acquire(timeout=5)


def test_a_job_formats_its_shell_command_once_per_params_and_resources(monkeypatch):
    formatted = []
    monkeypatch.setattr(snakemake_speedups, "_stock_shellcmd", lambda job: formatted.append(job) or "command")
    job = SimpleNamespace(_params=object(), _resources=object())
    assert [snakemake_speedups.job_shellcmd(job) for _ in range(3)] == ["command"] * 3
    assert len(formatted) == 1
    job._resources = object()  # a retry: Snakemake resets params and resources
    snakemake_speedups.job_shellcmd(job)
    assert len(formatted) == 2


def test_a_caption_without_snakemake_is_rendered_once_per_report_and_one_with_it_per_file(monkeypatch):
    from jinja2 import Environment

    rendered = []

    def stock_render(record, env, rst_links, categories, files):
        rendered.append(record.name)
        record.caption = f"<p>{record.raw_caption}</p>"

    monkeypatch.setattr(snakemake_speedups, "_stock_file_record_render", stock_render)
    monkeypatch.setattr(snakemake_speedups, "_rendered_captions", {})
    sources = {"plain.rst": "Loss per epoch.", "per_file.rst": "Dataset {{ snakemake.wildcards.dataset }}."}
    workflow = SimpleNamespace(
        sourcecache=SimpleNamespace(open=lambda path: SimpleNamespace(read=lambda: sources[path]))
    )

    def report(names, caption):
        env, rst_links, categories, files = Environment(), "\n\n.. _a.txt: javascript:void(0)\n", {}, []
        records = [SimpleNamespace(name=name, raw_caption=caption, workflow=workflow, caption=None) for name in names]
        for record in records:
            snakemake_speedups.file_record_render(record, env, rst_links, categories, files)
        return [record.caption for record in records]

    assert report(["A", "B", "C"], "plain.rst") == ["<p>plain.rst</p>"] * 3
    assert rendered == ["A"]
    assert report(["D", "E"], "plain.rst") == ["<p>plain.rst</p>"] * 2  # another report: rendered anew
    assert rendered == ["A", "D"]
    report(["F", "G"], "per_file.rst")
    assert rendered == ["A", "D", "F", "G"]
