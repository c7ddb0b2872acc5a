"""The conductor's Prometheus metrics: requests by model and outcome, time to first
audio, real-time factor and playback (underrun seconds and count, continuity: streams
that never underran) of requests with audio outputs, latency of requests with image
outputs, per-edge latency, the time requests waited for admission, and per model the
requests waiting for an admission slot (what an autoscaler scales the front of the mesh
on), admitted and refused. Which outputs are audio or images, and the audio's
sample rate, is what the model declares (ServedModel.output_kinds, .sample_rate)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from conductor.model import ServedModel
from runtime.metrics import process_registry

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5)


class ConductorMetrics:
    """registry: where the families go (default: a new one with the standard process
    and Python collectors, runtime.metrics.process_registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or process_registry()
        r = self.registry
        # a Counter's name is given with its _total: prometheus_client exposes it so
        self.requests = Counter("starmesh_requests_total", "requests ended, by model and outcome",
                                ["model", "outcome"], registry=r)
        self.in_flight = Gauge("starmesh_requests_in_flight", "requests being served", ["model"], registry=r)
        self.ttfa = Histogram("starmesh_ttfa_seconds", "time to first audio of requests with audio outputs",
                              ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.rtf = Histogram("starmesh_rtf_ratio", "real-time factor: wall seconds per audio second", ["model"],
                             buckets=RTF_BUCKETS, registry=r)
        self.image_latency = Histogram("starmesh_image_latency_seconds", "request latency of image requests",
                                       ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.underrun = Histogram("starmesh_underrun_seconds", "playback stall per audio request (client clock "
                                  "as the conductor sends)", ["model"], buckets=(0,) + LATENCY_BUCKETS, registry=r)
        self.underruns = Counter("starmesh_underruns_total", "playback stalls of audio requests", ["model"],
                                 registry=r)
        self.streams = Counter("starmesh_audio_streams_total", "audio requests ended, by whether playback never "
                               "stalled (continuity)", ["model", "continuity"], registry=r)
        self.queue_wait = Histogram("starmesh_admission_wait_seconds", "time a request waited for admission",
                                    ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.edge_latency = Histogram("starmesh_edge_latency_seconds", "production -> dispatch per hop or chunk",
                                      ["model", "edge"], buckets=LATENCY_BUCKETS, registry=r)

    def watch_admission(self, admission, models) -> None:
        """Exports `admission`'s (conductor.admission.Admission) waiting requests per model
        of `models` (names), read at scrape time."""
        self.registry.register(_AdmissionCollector(admission, tuple(models)))

    def edge_observer(self, model: str):
        return lambda edge, seconds: self.edge_latency.labels(model, edge).observe(seconds)

    def watch_sessions(self, sessions, models) -> None:
        """Exports the open sessions (id -> conductor.session_core.Session) per model of
        `models` (names; "" counts those not configured yet), read at scrape time."""
        self.registry.register(_SessionsCollector(sessions, tuple(models)))


class _SessionsCollector:
    def __init__(self, sessions, models: tuple[str, ...]) -> None:
        self.sessions, self.models = sessions, models

    def collect(self):
        family = GaugeMetricFamily("starmesh_sessions_open", "open Sessions streams (conversations) by model",
                                   labels=["model"])
        counts = dict.fromkeys(("", *self.models), 0)
        for session in list(self.sessions.values()):
            name = session.model.name if session.model is not None else ""
            counts[name] = counts.get(name, 0) + 1
        for model, n in counts.items():
            family.add_metric([model], n)
        yield family


class _AdmissionCollector:
    def __init__(self, admission, models: tuple[str, ...]) -> None:
        self.admission, self.models = admission, models

    def collect(self):
        waiting = GaugeMetricFamily("starmesh_admission_waiting", "requests waiting for an admission slot",
                                    labels=["model"])
        admitted = CounterMetricFamily("starmesh_admission_admitted", "requests admitted", labels=["model"])
        refused = CounterMetricFamily("starmesh_admission_refused", "requests refused (RESOURCE_EXHAUSTED)",
                                      labels=["model"])
        for model in self.models:
            stats = self.admission.stats(model)
            waiting.add_metric([model], stats["waiting"])
            admitted.add_metric([model], stats["admitted"])
            refused.add_metric([model], stats["refused"])
        yield from (waiting, admitted, refused)


class RequestMeter:
    """One request's view for the metrics: call output() per output, end() once."""

    def __init__(self, metrics: ConductorMetrics | None, model: ServedModel, now: float) -> None:
        self.metrics, self.model, self.t0 = metrics, model.name, now
        self.audio_outputs = model.outputs_of_kind("audio")
        self.image_outputs = model.outputs_of_kind("image")
        self.sample_rate = model.sample_rate
        self.first_audio: float | None = None
        self.audio_samples = 0
        self.has_image = False
        self.playback = None  # conductor.playback.Playback of an audio stream
        self.waited_s: float | None = None
        if metrics is not None:
            metrics.in_flight.labels(self.model).inc()

    def counts(self, name: str) -> bool:
        """output() reads values of this name (audio samples, images)."""
        return name in self.audio_outputs or name in self.image_outputs

    def output(self, name: str, value, now: float) -> None:
        if name in self.audio_outputs:
            if self.first_audio is None:
                self.first_audio = now - self.t0
            shape = getattr(value, "shape", ())
            n = 1
            for d in shape:
                n *= int(d)
            self.audio_samples += n
        elif name in self.image_outputs:
            self.has_image = True

    def end(self, outcome: str, now: float) -> None:
        m = self.metrics
        if m is None:
            return
        m.in_flight.labels(self.model).dec()
        m.requests.labels(self.model, outcome).inc()
        if self.waited_s is not None:
            m.queue_wait.labels(self.model).observe(self.waited_s)
        if outcome != "ok":
            return
        if self.first_audio is not None:
            m.ttfa.labels(self.model).observe(self.first_audio)
            if self.audio_samples:
                m.rtf.labels(self.model).observe((now - self.t0) / (self.audio_samples / self.sample_rate))
        if self.has_image:
            m.image_latency.labels(self.model).observe(now - self.t0)
        if self.playback is not None and self.playback.is_playing:
            m.underrun.labels(self.model).observe(self.playback.underrun_s)
            m.underruns.labels(self.model).inc(self.playback.num_underruns)
            continuity = "continuous" if self.playback.num_underruns == 0 else "underran"
            m.streams.labels(self.model, continuity).inc()
