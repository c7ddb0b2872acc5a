"""OffloadConfig: the compatibility matrix's reachable rejections name both options;
from_dict and the `starmesh serve --offload` flags build the same config."""
from __future__ import annotations

import argparse

import pytest

from cli import serve
from engine.offload.config import OffloadConfig, check_engine_kind
from engine.offload.loading import effective_config, process_config, set_process_config
from core.errors import InvalidArgument

REJECTED = [
    (dict(use_allgather=True, resident_layers=1), ("resident_layers", "use_allgather")),
    (dict(use_allgather=True, host_backing="cache", host_cache_root="/tmp/c"), ("host_backing", "use_allgather")),
    (dict(registration_budget_bytes=1 << 20), ("registration_budget_bytes", "host_backing")),
    (dict(registration_budget_bytes=1 << 20, host_backing="mmap"), ("registration_budget_bytes", "host_backing")),
    (dict(host_backing="cache"), ("host_backing", "host_cache_root")),
    (dict(host_cache_root="/tmp/c"), ("host_cache_root", "host_backing")),
]


@pytest.mark.parametrize("fields,named", REJECTED, ids=lambda v: "+".join(v) if isinstance(v, tuple) else None)
def test_invalid_combinations_are_rejected_naming_both_options(fields, named):
    with pytest.raises(InvalidArgument) as e:
        OffloadConfig(enabled=True, **fields)
    assert all(f"offload.{name}" in str(e.value) for name in named), str(e.value)


def test_allgather_is_rejected_on_a_kv_cache_engine_only():
    config = OffloadConfig(enabled=True, use_allgather=True)
    with pytest.raises(InvalidArgument, match="offload.use_allgather.*KV-cache engine"):
        check_engine_kind(config, "kv_cache")
    check_engine_kind(config, "stateless")
    with pytest.raises(InvalidArgument, match="KV-cache"):
        effective_config(config, "kv_cache")


def test_valid_combinations_and_field_checks():
    OffloadConfig(enabled=True, resident_layers=2, host_backing="mmap")
    OffloadConfig(enabled=True, use_allgather=True, host_backing="mmap")
    OffloadConfig(enabled=True, host_backing="cache", host_cache_root="/tmp/c", registration_budget_bytes=1 << 30)
    for bad in (dict(resident_layers=-1), dict(host_backing="disk"), dict(host_cache_lock_timeout_s=0),
                dict(transfer_chunk_bytes=-1), dict(resident_layers=True), dict(enabled="yes")):
        with pytest.raises(InvalidArgument, match=f"offload.{next(iter(bad))}"):
            OffloadConfig(**bad)


def test_from_dict_rejects_unknown_keys():
    assert OffloadConfig.from_dict({"enabled": True, "host_cache_lock_timeout_s": 5}).host_cache_lock_timeout_s == 5.0
    with pytest.raises(InvalidArgument, match="resident_layer"):
        OffloadConfig.from_dict({"resident_layer": 1})


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers())
    return parser.parse_args(["serve", "codec", *argv])


def test_serve_flags_and_the_deployment_option_build_the_config():
    args = _args("--offload", "--offload", "resident_layers=1", "--option", "max_batch_size=4")
    kwargs = serve._factory_kwargs(args)
    assert serve._offload_config(args, kwargs) == OffloadConfig(enabled=True, resident_layers=1)
    args = _args("--option", 'offload={"host_backing": "mmap"}', "--offload", "resident_layers=2")
    kwargs = serve._factory_kwargs(args)
    assert serve._offload_config(args, kwargs) == OffloadConfig(enabled=True, host_backing="mmap", resident_layers=2)
    assert "offload" not in kwargs  # the factory never sees it
    args = _args("--option", "x=1")
    assert serve._offload_config(args, serve._factory_kwargs(args)) is None
    with pytest.raises(InvalidArgument, match="resident_layers.*use_allgather"):
        args = _args("--offload", "use_allgather=true", "--offload", "resident_layers=1")
        serve._offload_config(args, serve._factory_kwargs(args))


def test_the_process_default_is_what_loaders_use():
    try:
        set_process_config(OffloadConfig(enabled=True, resident_layers=1))
        assert effective_config(None, "stateless") == process_config()
        assert effective_config(OffloadConfig(), "stateless") is None  # an explicit config wins
    finally:
        set_process_config(None)
    assert effective_config(None, "kv_cache") is None
