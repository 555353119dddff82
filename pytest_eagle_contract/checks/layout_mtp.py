"""The layout check of an MTP contract: the state the head was trained on (the training
section's last slot: speculators 0.9.0 keeps the last captured layer as the MTP input,
``train/data.py`` ``verifier_last_hidden_states``) against the one state the serving engine
feeds it (``engines/mtp.py``). A different state is EC501; an engine or target whose MTP path
was not read, EC510."""

from __future__ import annotations

from ..findings import Finding
from .layout_types import LayoutReport


def check_mtp(contract: object, report: LayoutReport) -> list[Finding]:
    from ..engines import method_engines
    from ..engines.base import releases_for
    from ..engines.mtp import PACKAGES, refusal, releases, resolve_mtp
    from ..errors import Unservable

    c = report.contract
    serving, training = c.serving, c.training
    assert serving is not None
    own = method_engines.serves(serving.engine, "mtp")  # method_engines.py's rules
    why = None if own else refusal(serving.engine)
    if why is not None:
        report.add("EC510", why, "serving.engine")
        return report.findings
    L = c.target.num_hidden_layers
    arch = serving.arch or c.target.arch
    versions: list[str | None] = (
        method_engines.versions(serving.engine, "mtp", serving.version)
        if own
        else [None]
        if serving.version is None
        else list(releases_for(serving.version, releases(serving.engine), PACKAGES[serving.engine]))
    )
    trained = training.slots[-1].layer if training is not None and training.slots else None
    for version in versions:
        engine = f"{serving.engine} {version}" if version else serving.engine
        try:
            res = (
                method_engines.resolve(serving.engine, "mtp", L, None, None, arch, version)
                if own
                else resolve_mtp(serving.engine, L, arch, version)
            )
        except Unservable as exc:
            report.add("EC510", f"{engine} would not serve this MTP head: {exc}", "serving")
            continue
        if own:  # a source snapshot says so
            engine = method_engines.named(serving.engine, version, res.version)
        served = res.layers[0]
        if trained is not None and trained != served:
            report.add(
                "EC501",
                f"{engine} feeds the MTP head {served}; the contract's training slot says "
                f"{trained}",
                "training",
                hint=f"train the MTP head on {served} (what {engine} hands it), or serve it on "
                "an engine that feeds the trained state (eagle-contract resolve --method mtp)",
                expected=str(trained),
                found=str(served),
                details=f"serving source: {res.source}",
            )
    return report.findings
