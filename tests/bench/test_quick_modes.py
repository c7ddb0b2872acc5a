"""Every benchmark's --quick mode runs to its end and writes its headline figures.

A benchmark is a module of bench/ with a `__main__` and a `--json` option (the helpers
that benchmarks start as processes, e.g. bench.conductor_client, are not). Each one runs
as `python -m bench.<name> --quick --json PATH` in a subprocess, as a person runs it:
it must exit 0 and its JSON must hold the module's headline keys, each with a value
(a benchmark that another runs whole, RUN_INSIDE, has its keys checked in that one's JSON).
No figure is compared with anything: a quick run's sizes are the smallest that take
every code path, so its figures mean nothing, and speed is never a test's business.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 150  # a quick run takes seconds to a minute on a loaded 2-core machine: past this it hangs

# module -> headline keys of its JSON ("a.b": key b of the object under key a)
HEADLINES: dict[str, tuple[str, ...]] = {
    "ab": ("figures.runtime_us_per_item.head_over_base",),
    "bagel": ("t2i_cfg_parallel_speedup", "edit_cfg_parallel_speedup", "t2i_mesh_over_inprocess_p50",
              "und_batch16_over_sequential", "followup_first_step_speedup", "followup_prefill_tokens_saved"),
    "chaos": ("requests_failed_unrelated", "leaked_blocks", "leaked_segments", "fuzz_bad_statuses",
              "overload_refused", "tls_hop_over_plain"),
    "chaos_front_door": ("expensive_request_victims_failed", "unauth_flood_rss_growth_mb"),
    "chaos_hung": ("hung_replica_detect_s", "hung_replica_restart_s", "killed_replica_detect_s", "busy_restarts"),
    "chaos_gateway": ("gateway_5xx_on_bad_input", "gateway_chunked_flood_rss_growth_mb",
                      "gateway_concurrent_flood_rss_growth_mb"),
    "codec_batch": ("T4_B2.per_window_over_alone", "T50_B16.per_window_over_alone"),
    "conductor": ("hop_us_c1", "hop_us_c16", "conductor_cpu_us_per_item", "mesh_over_inprocess",
                  "time_to_unavailable_ms", "spec_speedup", "grpc_stream_floor_us_per_msg",
                  "mesh_over_frontdoor_inprocess", "mesh_cpu_us_per_item", "inprocess_cpu_us_per_item",
                  "conductor_cpu_us_per_item_long"),
    "conductor_path": ("rows_us_per_item", "entries_us_per_item", "rows_over_entries"),
    "encoders": ("batched_over_single", "ttfa_ms", "hf_ttfa_ms", "ttfa_ratio"),
    "fuzz": ("fuzz_messages", "fuzz_bad_statuses", "rss_growth_mb", "fuzz_processes_alive"),
    "gateway": ("added_ttfa_ms_p50", "gateway_cpu_us_per_chunk", "gateway_over_grpc_c16", "cancel_free_ms"),
    "grpc_floor": ("grpc_stream_floor_us_per_msg", "grpc_stream_floor_msgs_per_s"),
    "image": ("mesh_p50_ms", "diffusers_p50_ms", "mesh_over_diffusers_p50", "cfg_parallel_speedup",
              "cfg_parallel_predicted", "mesh_img_per_s", "diffusers_img_per_s"),
    "membership": ("requests_lost", "first_request_after_join_s", "drain_s", "throughput_before", "throughput_after"),
    "offload": ("resident_ms", "dlo_ms", "dlo_over_resident", "dlo_bitwise_equal", "dlo_weight_bytes",
                "pss_mib_two_processes_mmap", "thinker_dlo_over_resident", "code2wav_dlo_over_resident"),
    "orpheus": ("c1.ttfa_ms_p50", "c1.ttfa_ratio", "c1.audio_s_per_s", "c1.viability", "targets"),
    "overload": ("overload_refused", "overload_admitted_ttfa_ms_p99", "ttfa_ms_alone"),
    "rollout": ("speedup_h2", "flop_ratio_h2", "rollouts_per_s_b1", "rollouts_per_s_b8", "plan_sharing_speedup"),
    "routed_item": ("runtime_us_per_item", "component_us_per_item", "runtime_over_component", "item_runs_us_per_item",
                    "item_runs_over_chunk_runs"),
    "session_vad": ("vad_cpu_per_audio_s", "vad_cpu_ms_per_append"),
    "realtime": ("ttfa_turn10_over_turn1", "baseline_ttfa_turn10_over_turn1", "barge_in_stop_ms_p50",
                 "sessions_c8_viability", "added_ttfa_ms_p50"),
    "prefix": ("ttft_hit_over_miss", "chat_turn10_over_turn1_ttft", "baseline_chat_turn10_over_turn1_ttft",
               "shared_prefix_throughput_ratio", "cache_overhead"),
    "speech": ("c1.ttfa_ms_p50", "c1.ttfa_ratio", "c1.audio_s_per_s", "c1.mesh_over_inprocess", "targets",
               "deadline.c1.ttfa_ms_p50", "fcfs_poisson.c1.viability",
               "burst_p99_over_inprocess_max_c16", "cpu_s_per_audio_s_mesh_over_inprocess"),
    "speech_policies": ("fcfs.c1.ttfa_ms_p99", "deadline.c1.ttfa_ms_p99", "deadline_poisson.c1.viability",
                        "deadline.c1.cpu_s_per_audio_s", "targets"),
    "speech_stalls": ("rounds", "concurrency", "schedule"),
    "speech_timeline": ("ttfa_ms_median", "ttfa_over_alone", "codes_ready_ms_max", "cpu_window_burst.processes"),
    "supervision": ("requests_failed_unrelated", "time_to_unavailable_ms_p99", "restart_s", "leaked_blocks",
                    "leaked_segments", "bad_failures"),
    "talker_step": ("b1.processed_over_plain", "rows_long_over_short"),
    "thinker": ("engine_tokens_per_s", "hf_batched_tokens_per_s", "hf_sequential_tokens_per_s",
                "hf_continuous_tokens_per_s", "speedup_vs_hf_batched", "speedup_vs_hf_sequential"),
    "tls": ("tls_hop_over_plain", "plain_hop_us", "tls_hop_us", "tls_echo_over_plain", "mtls_hop_over_plain",
            "mtls_hop_us"),
    "tracing": ("traced_audio_s_per_s", "untraced_audio_s_per_s", "tracing_overhead", "num_spans"),
    "transport": ("shm_gbps", "memcpy_gbps", "shm_over_memcpy", "small_handoff_us", "grpc_echo_us"),
}


# module -> headline ratios that must be positive finite numbers (a zero or NaN is a broken
# measurement, e.g. a CPU window that missed its processes); their size is not tested
POSITIVE: dict[str, tuple[str, ...]] = {
    "speech": ("burst_p99_over_inprocess_max_c16", "cpu_s_per_audio_s_mesh_over_inprocess"),
}


def benchmark_modules() -> set[str]:
    return {p.stem for p in (REPO / "bench").glob("*.py")
            if "__main__" in (text := p.read_text()) and '"--json"' in text}


def lookup(figures: dict, key: str):
    for part in key.split("."):
        if not isinstance(figures, dict) or part not in figures:
            return None
        figures = figures[part]
    return figures


def is_positive(value) -> bool:
    """A positive finite number (json reads a written NaN or Infinity back as a float: not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def run_quick(name: str, out: Path, log: Path) -> int:
    """`python -m bench.<name> --quick --json out`, its output in `log`; the exit status.
    In its own process group, so that a hung run is killed with the services it started."""
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", f"bench.{name}", "--quick", "--json", str(out)], cwd=REPO,
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise


# A benchmark that only runs others' measures in turn: its parts' quick modes run here
# (each is also its own module), so running it again would double its parts' ~40-70 s.
COMPOSITES = {"chaos": ("supervision", "fuzz", "overload", "tls", "chaos_front_door", "chaos_hung", "chaos_gateway")}

# A benchmark that another runs whole, through its own options and run(), writing its keys
# into the other's JSON (key renames: {its key: the key there}): its headline keys are checked
# there, and its own quick run would start the same meshes again. bench.speech --quick runs
# `bench.speech_policies --quick` (its `targets` under `policy_targets`).
RUN_INSIDE = {"speech_policies": ("speech", {"targets": "policy_targets"})}


def headline_keys(name: str) -> tuple[str, ...]:
    """HEADLINES[name] and those of the benchmarks that `name` runs inside it, renamed."""
    inside = [(part, renames) for part, (host, renames) in RUN_INSIDE.items() if host == name]
    return HEADLINES[name] + tuple(renames.get(key, key) for part, renames in inside for key in HEADLINES[part])


def test_every_benchmark_has_a_quick_test():
    assert benchmark_modules() == set(HEADLINES)
    assert all(set(parts) <= set(HEADLINES) - set(COMPOSITES) for parts in COMPOSITES.values())
    assert all(host in set(HEADLINES) - set(COMPOSITES) - set(RUN_INSIDE) for host, _ in RUN_INSIDE.values())


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
@pytest.mark.parametrize("name", sorted(set(HEADLINES) - set(COMPOSITES) - set(RUN_INSIDE)))
def test_quick_mode_runs_and_writes_its_headline_keys(name, tmp_path):
    out, log = tmp_path / f"{name}.json", tmp_path / f"{name}.log"
    try:
        code = run_quick(name, out, log)
    except subprocess.TimeoutExpired:
        pytest.fail(f"bench.{name} --quick still running after {RUN_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")
    assert code == 0, f"bench.{name} --quick exited with {code}:\n{log.read_text()[-4000:]}"
    figures = json.loads(out.read_text())
    missing = [key for key in headline_keys(name) if lookup(figures, key) is None]
    assert not missing, f"bench.{name} --quick wrote no {missing}; its keys: {sorted(figures)}"
    bad = {key: lookup(figures, key) for key in POSITIVE.get(name, ()) if not is_positive(lookup(figures, key))}
    assert not bad, f"bench.{name} --quick: not positive finite numbers: {bad}"
