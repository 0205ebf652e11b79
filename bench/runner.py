"""Running: a fresh server process per workload and repetition, interleaved, the
samples and peak RSS kept per server."""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from report import fmt_mib, fmt_value
from rows import Ctx, Limit, Results, Sample, Workload, limit_key
from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    _LIVE,
    BenchError,
    Conn,
    MiB,
    Unsupported,
    _kill,
    log,
    supported_flags,
)
from servers import SERVERS, SFS
from workloads import w_startup


def sandboxfs_flags(args: argparse.Namespace) -> list[str]:
    """Limits raised so that every workload fits (only the options this sandboxfs has)."""
    wanted = {
        "--max-walk-entries": args.max_walk_entries,  # default 100,000 < the big tree
        "--max-read-bytes": 64 * MiB,  # the 10 MiB whole read (the 32 MiB default is enough)
        "--max-line-bytes": 64 * MiB,
        "--max-write-bytes": 64 * MiB,
        "--max-search-seconds": 600,  # grep_files must search the whole tree
    }
    return supported_flags(shlex.split(args.sandboxfs_cmd), wanted)


class Runner:
    def __init__(self, args: argparse.Namespace, ctx: Ctx, logdir: Path) -> None:
        self.args = args
        self.ctx = ctx
        self.logdir = logdir
        root = str(ctx.root)
        self.commands: dict[str, list[str]] = {}
        for server in args.servers:
            if server == SFS:
                self.commands[SFS] = [*args.cmds[SFS], *sandboxfs_flags(args), "--", root]
            else:
                self.commands[server] = [*args.cmds[server], root]
        self._spawns = 0
        if SFS in args.servers:
            ctx.cache["sfs_cmd"] = args.cmds[SFS]
            ctx.cache["sfs_flags"] = sandboxfs_flags(args)
        ctx.cache["logdir"] = logdir
        ctx.cache["http_seconds"] = 2.0 if args.quick else 6.0

    def spawn(
        self, server: str, workload: str, *, stateless: bool = False, journal: bool = False
    ) -> Conn:
        self._spawns += 1
        command = self.commands[server]
        if journal:  # a fresh journal, outside the served directory
            where = self.ctx.root.parent / f"{self.ctx.root.name}-journal"
            shutil.rmtree(where, ignore_errors=True)
            cut = command.index("--")
            command = [*command[:cut], "--journal", str(where), *command[cut:]]
        conn = Conn(
            server,
            command,
            log_path=self.logdir / f"{self._spawns:04d}-{server}-{workload}.stderr",
            timeout=self.args.timeout,
        )
        try:
            if stateless:
                conn.stateless_start()
            else:
                conn.handshake()
        except BaseException:
            conn.close()
            raise
        return conn

    def profile_start(self, conn: Conn, wl: Workload, rep: int) -> subprocess.Popen[bytes] | None:
        """py-spy attached to a sandboxfs server for the length of one workload."""
        if not self.args.profile or conn.label != SFS:
            return None
        suffix = {"speedscope": ".json", "flamegraph": ".svg", "raw": ".txt"}
        out = Path(self.args.profile) / f"{wl.key}-rep{rep}{suffix[self.args.profile_format]}"
        cmd = [self.args.py_spy, "record", "--pid", str(conn.pid), "--rate", "250"]
        cmd += ["--format", self.args.profile_format, "-o", str(out), "--nonblocking"]
        if self.args.profile_idle:
            cmd.append("--idle")
        if self.args.profile_gil:
            cmd.append("--gil")
        with open(out.with_suffix(".log"), "wb") as err:
            proc = subprocess.Popen(  # noqa: S603 - our own py-spy command
                cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
            )
        _LIVE[proc.pid] = proc
        time.sleep(1.0)  # let py-spy attach
        return proc

    @staticmethod
    def profile_stop(proc: subprocess.Popen[bytes] | None) -> None:
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            _kill(proc)
        _LIVE.pop(proc.pid, None)

    def run_one(self, wl: Workload, server: str, rep: int, results: Results) -> None:
        if wl.before:
            wl.before(self.ctx)
        conn = self.spawn(server, wl.key, stateless=wl.stateless, journal=wl.journal)
        profiler = None
        idle = None
        try:
            if wl.run is w_startup:
                time.sleep(self.args.idle_wait)
                idle = conn.rss_kib()
            profiler = self.profile_start(conn, wl, rep)
            measure = wl.run(conn, self.ctx)
            self.profile_stop(profiler)
            profiler = None
            hwm = conn.hwm_kib()
        finally:
            self.profile_stop(profiler)
            conn.close()
        results.add(wl.key, server, Sample(measure.value, hwm, idle, measure.detail))
        extra = f" idle RSS {fmt_mib(idle)} MiB" if idle else ""
        log(
            f"  {wl.key:<12} {server:<15} {fmt_value(measure.value, wl.unit):>10} {wl.unit}"
            f"  peak RSS {fmt_mib(hwm)} MiB{extra}  {measure.detail}"
        )

    def run_limit(self, wl: Workload, limit: Limit, results: Results) -> None:
        key = (wl.key, limit_key(limit))
        if key in results.failed:
            return
        try:
            measure, peak = limit.run(self.ctx)
        except BenchError as exc:
            results.failed[key] = str(exc)
            log(f"  {wl.key:<12} {'limit':<15} FAILED: {exc}")
            return
        results.add(*key, Sample(measure.value, peak, None, measure.detail))
        rss = f"  peak RSS {fmt_mib(peak)} MiB" if peak else ""
        log(
            f"  {wl.key:<12} {'limit':<15} {fmt_value(measure.value, wl.unit):>10} {wl.unit}"
            f"{rss}  {limit.name}: {measure.detail}"
        )

    def run(self, workloads: list[Workload], results: Results) -> None:
        servers = [s for s in SERVERS if s in self.args.servers]
        if SFS in servers:  # which tools does this sandboxfs serve?
            probe = self.spawn(SFS, "probe")
            tools = probe.tools
            probe.close()
            for wl in workloads:
                if wl.tool and wl.tool not in tools:
                    results.skipped[wl.key] = f"sandboxfs has no {wl.tool}"
                    log(f"skipping {wl.key}: sandboxfs's tools/list has no {wl.tool}")
        active = [wl for wl in workloads if wl.key not in results.skipped]
        for rep in range(1, self.args.reps + 1):
            order = servers if rep % 2 == 1 else servers[::-1]
            log(f"rep {rep}/{self.args.reps} (order: {' then '.join(order)})")
            for wl in active:
                for server in order:
                    if (wl.key, server) in results.failed or (wl.key, server) in results.na:
                        continue
                    if wl.sfs_only and server != SFS:
                        continue  # the reference has no such tool
                    try:
                        self.run_one(wl, server, rep, results)
                    except Unsupported as exc:
                        results.na[(wl.key, server)] = str(exc)
                        log(f"  {wl.key:<12} {server:<15} n/a: {exc}")
                    except BenchError as exc:
                        results.failed[(wl.key, server)] = str(exc)
                        log(f"  {wl.key:<12} {server:<15} FAILED: {exc}")
                if not self.args.no_limits:
                    for limit in wl.limits:
                        self.run_limit(wl, limit, results)
