"""`phaseplan profile import …`: converting a third party's measured kernel tables into a phaseplan profile."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("import")
def profile_import() -> None:
    """Convert a third party's measured kernel tables into a profile (provenance kept)."""


@profile_import.command("aiconfigurator")
@click.option("--system", default="h200_sxm", show_default=True, help="AIConfigurator system (its data folder).")
@click.option("--backend", default="sglang", show_default=True, help="Serving framework whose kernels were timed.")
@click.option("--version", "version", default=None, help="Newest framework version to read (default: newest).")
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Read the tables from this systems/data/<system> folder instead of the installed package.",
)
@click.option(
    "--moe-distribution",
    default="power_law_1.01",
    show_default=True,
    help="Measured MoE routing to read: power_law_1.01 (AIConfigurator's DeepSeek default), power_law_1.2, balanced.",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Profile JSON to write.")
def aiconfigurator(
    system: str, backend: str, version: str | None, data: Path | None, moe_distribution: str, out: Path
) -> None:
    """NVIDIA AIConfigurator's measured tables (PyPI aiconfigurator-core, Apache-2.0) as a profile."""
    from simulator.calibration.aiconfigurator import import_profile

    doc = import_profile(system, backend, out, version=version, data=data, moe_distribution=moe_distribution)
    counts = ", ".join(f"{f} {len(e['rows'])}" for f, e in doc["kernels"].items())
    click.echo(f"wrote {out}: {doc['measured_by']['summary']}; entries: {counts}")


@click.command("fit")
@click.option(
    "--profile",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="A measured profile (e.g. profiles/h200-sglang.json).",
)
@click.option("--hardware", default="h200", show_default=True, help="Hardware preset whose roofline is fitted.")
@click.option(
    "--allow-profile-mismatch",
    is_flag=True,
    help="Fit a profile measured on another device than --hardware (its factors then describe neither).",
)
def profile_fit(path: Path, hardware: str, allow_profile_mismatch: bool) -> None:
    """Fit a hardware's roofline factors to a measured profile; prints residuals and the preset's YAML."""
    import yaml

    from simulator.calibration.fit import fit_file
    from simulator.config import presets
    from simulator.config.specs import HardwareSpec
    from simulator.errors import InputError

    try:
        hw = HardwareSpec(**presets.hardware(hardware))
    except InputError as e:
        raise InputError(f"--hardware {hardware}: {e}") from None
    result = fit_file(path, hw, allow_profile_mismatch)
    click.echo("| group | entries | rms log error before | after | median roofline/measured before | after |")
    click.echo("|---|---:|---:|---:|---:|---:|")
    for r in result.residuals:
        click.echo(
            f"| {r.group} | {r.entries:,} | {r.rms_before:.3f} | {r.rms_after:.3f} | {r.ratio_before:.2f} | "
            f"{r.ratio_after:.2f} |"
        )
    click.echo("\n# for the hardware preset:")
    click.echo(yaml.safe_dump({**result.hardware, "roofline": {"factors": result.factors}}, sort_keys=False).rstrip())
    for name, v in result.engine.items():
        pool_field = {"fp8_kv_dequant_factor": "fp8_kv_read_factor"}[name]
        click.echo(f"# engine-specific (this profile's engine), a pool's setting: deployment.<pool>.{pool_field}: {v}")
