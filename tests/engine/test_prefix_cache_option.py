"""`--option prefix_cache=false` reaches the engine: the serve flag's value is parsed as
JSON and goes, with the other engine options, into EngineConfig; the context options are
validated there, naming the field."""
from __future__ import annotations

import pytest

from core.errors import InvalidArgument
from engine.checkpoints.tiny_text import make_tiny
from engine.engine_config import EngineConfig


def test_the_serve_option_turns_the_cache_off_in_the_thinkers_engine(tmp_path):
    from cli.main import build_parser
    from cli.serve import _factory_kwargs
    from services.thinker.component import ThinkerComponent

    ckpt = str(make_tiny("qwen3", tmp_path))
    args = build_parser().parse_args(["serve", "thinker", "--checkpoint", ckpt, "--option", "prefix_cache=false",
                                      "--option", "context_ttl_s=30"])
    kwargs = _factory_kwargs(args)
    assert kwargs == {"checkpoint": ckpt, "prefix_cache": False, "context_ttl_s": 30}
    engine = ThinkerComponent.from_checkpoint(**kwargs).engine
    assert engine.config.prefix_cache is False and not engine.scheduler.cache.enabled
    assert engine.contexts.limits.ttl_s == 30
    assert ThinkerComponent.from_checkpoint(ckpt).engine.scheduler.cache.enabled  # on by default


@pytest.mark.parametrize("field, value, message", [
    ("prefix_cache", "no", "prefix_cache must be true or false"),
    ("context_ttl_s", 0, "context_ttl_s must be > 0"),
    ("context_max_blocks", -1, "engine.context_max_blocks must be an integer >= 0"),
    ("context_max_blocks_per_owner", 1.5, "engine.context_max_blocks_per_owner must be an integer >= 0"),
])
def test_bad_cache_options_name_the_field(field, value, message):
    with pytest.raises(InvalidArgument, match=message):
        EngineConfig(**{field: value})


def test_context_limits_default_to_half_the_pool():
    limits = EngineConfig(num_blocks=100).context_limits
    assert limits.max_blocks == limits.max_blocks_per_owner == 50
    limits = EngineConfig(num_blocks=100, context_max_blocks=30, context_max_blocks_per_owner=10).context_limits
    assert (limits.max_blocks, limits.max_blocks_per_owner) == (30, 10)
