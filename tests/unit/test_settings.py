"""Settings: constructor > ``CONVEYOR_*`` env > conveyor.toml / YAML > defaults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conveyor.app import Conveyor
from conveyor.errors import ConfigurationError
from conveyor.settings import DEFAULT_URL, Settings, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No stray CONVEYOR_* variable nor config file may leak into these tests."""
    for name in list(os.environ):
        if name.startswith("CONVEYOR_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_match_the_spec() -> None:
    s = load_settings()
    assert s.url == DEFAULT_URL == "sqlite:///./conveyor.db"
    assert s.concurrency == 50
    assert s.lease == 30.0
    assert s.stall_interval == 30.0
    assert s.max_stalled == 3
    assert s.heartbeat_interval == 10.0
    assert s.shutdown_timeout == 30.0
    assert s.default_attempts == 3
    assert s.default_timeout == 300.0
    assert s.backoff_base == 1.0
    assert s.backoff_max == 3600.0
    assert s.backoff_multiplier == 2.0
    assert s.idempotency_ttl == 86400.0
    assert s.max_payload_bytes == 1024 * 1024
    assert s.circuit_threshold == 5
    assert s.circuit_open_for == 60.0
    assert s.keep_completed == 86400.0
    assert s.keep_failed == 7 * 86400.0
    assert s.api_tokens == {}
    assert s.worker_queue_ttl == 300.0


def test_constructor_arguments_win_over_env_and_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "conveyor.toml").write_text(
        'concurrency = 7\nlease = "7s"\nurl = "memory://file"\n'
    )
    monkeypatch.setenv("CONVEYOR_CONCURRENCY", "8")
    monkeypatch.setenv("CONVEYOR_LEASE", "8s")
    s = load_settings(concurrency=9, lease="250ms")
    assert s.concurrency == 9
    assert s.lease == 0.25
    assert s.url == "memory://file"  # not given anywhere above the file


def test_env_wins_over_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "conveyor.toml").write_text('concurrency = 7\nstall_interval = "1m"\n')
    monkeypatch.setenv("CONVEYOR_CONCURRENCY", "8")
    s = load_settings()
    assert s.concurrency == 8
    assert s.stall_interval == 60.0  # the file still supplies what env does not


def test_toml_file_wins_over_defaults(tmp_path: Path) -> None:
    (tmp_path / "conveyor.toml").write_text(
        'url = "memory://"\nlease = "250ms"\nmax_stalled = 1\nkeep_completed = 100\n'
    )
    s = load_settings()
    assert s.url == "memory://"
    assert s.lease == 0.25
    assert s.max_stalled == 1
    assert s.keep_completed == 100
    assert s.shutdown_timeout == 30.0  # untouched keys keep their defaults


@pytest.mark.parametrize("name", ["conveyor.yaml", "conveyor.yml"])
def test_yaml_file_wins_over_defaults(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("concurrency: 4\nheartbeat_interval: 2.5\ncancel_grace: 300ms\n")
    s = load_settings()
    assert s.concurrency == 4
    assert s.heartbeat_interval == 2.5
    assert s.cancel_grace == 0.3


def test_config_file_named_by_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "prod.toml").write_text("concurrency = 11\n")
    (tmp_path / "conveyor.toml").write_text("concurrency = 3\n")
    monkeypatch.setenv("CONVEYOR_CONFIG", str(other / "prod.toml"))
    assert load_settings().concurrency == 11


def test_env_values_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_URL", "memory://from-env")
    monkeypatch.setenv("CONVEYOR_LEASE", "250ms")
    monkeypatch.setenv("CONVEYOR_SHUTDOWN_TIMEOUT", "0.5s")
    monkeypatch.setenv("CONVEYOR_DEFAULT_TIMEOUT", "5m")
    monkeypatch.setenv("CONVEYOR_IDEMPOTENCY_TTL", "1h")
    monkeypatch.setenv("CONVEYOR_BACKOFF_MULTIPLIER", "1.5")
    monkeypatch.setenv("CONVEYOR_API_TOKENS", '{"s3cret": ["read", "enqueue"]}')
    s = load_settings()
    assert s.url == "memory://from-env"
    assert s.lease == 0.25
    assert s.shutdown_timeout == 0.5
    assert s.default_timeout == 300.0
    assert s.idempotency_ttl == 3600.0
    assert s.backoff_multiplier == 1.5
    assert s.api_tokens == {"s3cret": ["read", "enqueue"]}


def test_conveyor_reads_the_url_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_URL", "memory://env-app")
    assert Conveyor().url == "memory://env-app"
    assert Conveyor("memory://explicit").url == "memory://explicit"
    assert Conveyor(url="memory://x", lease="2s").settings.lease == 2.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("250ms", 0.25), ("0.5s", 0.5), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), (1.5, 1.5)],
)
def test_durations_accept_strings_and_seconds(value: str | float, seconds: float) -> None:
    s = load_settings(lease=value, stall_interval=value, circuit_open_for=value)
    assert s.lease == s.stall_interval == s.circuit_open_for == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lease", "soon"),
        ("stall_interval", "-1s"),
        ("concurrency", 0),
        ("concurrency", "many"),
        ("max_stalled", -1),
        ("default_attempts", 0),
        ("backoff_multiplier", 0.5),
        ("max_payload_bytes", 0),
        ("keep_completed", "forever"),
        ("keep_failed", -3),
        ("url", "no-scheme-here"),
        ("api_tokens", {"tok": ["superuser"]}),
        ("sqlite_synchronous", "sometimes"),
    ],
)
def test_configuration_error_names_the_bad_key(key: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=key):
        load_settings(**{key: value})


def test_bad_env_value_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_HEARTBEAT_INTERVAL", "every so often")
    with pytest.raises(ConfigurationError, match="heartbeat_interval"):
        load_settings()


def test_bad_file_value_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "conveyor.toml").write_text('circuit_threshold = "lots"\n')
    with pytest.raises(ConfigurationError, match="circuit_threshold"):
        load_settings()


def test_unknown_key_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="leese"):
        load_settings(leese="1s")


def test_unknown_key_in_the_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "conveyor.toml").write_text("concurrencyy = 3\n")
    with pytest.raises(ConfigurationError, match="concurrencyy"):
        load_settings()


def test_conveyor_constructor_raises_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="lease"):
        Conveyor("memory://", lease="a while")


def test_configuration_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        load_settings(concurrency=-5)


@pytest.mark.parametrize(
    ("value", "expected", "kind"),
    [
        (1000, 1000, int),
        ("1000", 1000, int),
        (0, 0, int),
        ("1d", 86400.0, float),
        ("2h", 7200.0, float),
        ("250ms", 0.25, float),
        (3600.0, 3600.0, float),
        (None, None, type(None)),
        ("none", None, type(None)),
    ],
)
def test_keep_completed_is_a_count_or_an_age(value: object, expected: object, kind: type) -> None:
    s = load_settings(keep_completed=value) if value is not None else Settings(keep_completed=None)
    assert s.keep_completed == expected
    assert type(s.keep_completed) is kind


def test_keep_failed_count_from_env_stays_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_KEEP_FAILED", "500")
    monkeypatch.setenv("CONVEYOR_KEEP_COMPLETED", "12h")
    s = load_settings()
    assert s.keep_failed == 500
    assert isinstance(s.keep_failed, int)
    assert s.keep_completed == 12 * 3600.0
    assert isinstance(s.keep_completed, float)


def test_keep_completed_refuses_a_boolean() -> None:
    with pytest.raises(ConfigurationError, match="keep_completed"):
        load_settings(keep_completed=True)


def test_settings_are_frozen() -> None:
    s = load_settings()
    with pytest.raises(ValueError, match="frozen"):
        s.concurrency = 3


def test_prefetch_is_derived_by_default_and_set_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().prefetch is None  # the worker uses concurrency // 2
    monkeypatch.setenv("CONVEYOR_PREFETCH", "0")
    assert load_settings().prefetch == 0


def test_prefetch_refuses_a_negative_count() -> None:
    with pytest.raises(ConfigurationError, match="prefetch"):
        load_settings(prefetch=-1)


def test_a_setting_from_the_environment_names_its_variable_and_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONVEYOR_CONCURRENCY", "lots")
    with pytest.raises(ConfigurationError, match=r"concurrency \(CONVEYOR_CONCURRENCY\): 'lots'"):
        load_settings()


def test_a_json_setting_that_is_not_json_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_QUEUE_THRESHOLDS", "emails=5")
    with pytest.raises(ConfigurationError, match=r"'emails=5' is not JSON; expected a JSON object"):
        load_settings()


def test_a_config_file_that_is_not_toml_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "conveyor.toml"
    bad.write_text("lease = \n")
    monkeypatch.setenv("CONVEYOR_CONFIG", str(bad))
    with pytest.raises(ConfigurationError, match="is not valid TOML"):
        load_settings()
