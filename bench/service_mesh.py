"""Service processes on loopback and a conductor in this process over them: the mesh a
benchmark measures (bench.image, bench.bagel_mesh)."""
from __future__ import annotations


class ServiceMesh:
    """procs: runtime.process.ServiceProcess objects (not started); models_of: their
    addresses, in order -> the conductor's ServedModels. Entered: every process started
    (side by side), the conductor serving; left: all stopped."""

    def __init__(self, procs: list, models_of) -> None:
        self.procs, self.models_of = procs, models_of

    def __enter__(self) -> "ServiceMesh":
        from concurrent.futures import ThreadPoolExecutor

        from conductor.service import ConductorService
        from runtime.background import BackgroundServer
        from runtime.process import ServiceProcess

        try:
            with ThreadPoolExecutor(len(self.procs)) as pool:
                list(pool.map(ServiceProcess.start, self.procs))
        except BaseException:
            for proc in self.procs:
                proc.stop()
            raise
        self.conductor = BackgroundServer(ConductorService(self.models_of([p.address for p in self.procs])))
        self.conductor.start()
        return self

    def __exit__(self, *exc) -> None:
        self.conductor.stop()
        for proc in self.procs:
            proc.stop()
