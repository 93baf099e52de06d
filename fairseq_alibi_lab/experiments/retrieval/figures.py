"""The report's figures: accuracy by depth and length per model, by the asked needle's distance in
tokens, and perplexity by tokens of context; each panel a family of models (Model.family)."""
import os

from fairseq_alibi_lab.experiments.retrieval.floors import METRICS
from fairseq_alibi_lab.experiments.retrieval.prompts import TASKS


# The attention field in tokens (docs/retrieval.md): ALiBi's head h pays m_h per token of distance, so
# its reach is about 1/m_h tokens whatever L is; the small recipe's decoders have 8 heads.
HEADS = 8


# The panels, in order: each model's Model.family (a relative bias where it names none).
FAMILIES = ("ALiBi and its family", "other relative biases", "rotary", "absolute positions, none")
OTHER = FAMILIES[1]


def mark_the_field(axis, reaches, train_length):
    """Each ALiBi head's reach dotted and the training length solid, on a panel whose x is tokens."""
    for reach in reaches:
        axis.axvline(reach, color="0.8", linestyle=":", linewidth=0.8)
    axis.axvline(train_length, color="0.5", linewidth=0.8)


def distance_figure(models, floor, out, metric, suffix, train_length, family):
    """OUT/retrieval_distance<suffix>.png: the metric against the asked needle's distance from the
    question in tokens (by_distance's bins, the mean over the seeds), one row of panels per task and one panel per
    family of models (family: name -> its panel), the floor from the prompts dashed, each ALiBi head's reach 1/m_h dotted and
    the training length L solid."""
    from fairseq_alibi.slopes import alibi_slopes
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.results import pyplot

    tasks = [t for t in TASKS if t in models]
    if not tasks:
        return
    present = {family[n] for t in tasks for n in models[t]}
    families = [group for group in FAMILIES if group in present]
    plt = pyplot()
    figure, axes = plt.subplots(len(tasks), len(families), figsize=(3.2 * len(families), 2.6 * len(tasks)),
                                squeeze=False, sharex=True, sharey=True, layout="constrained")
    reaches = [1 / m for m in alibi_slopes(HEADS)]
    for i, task in enumerate(tasks):
        for j, group in enumerate(families):
            axis = axes[i][j]
            mark_the_field(axis, reaches, train_length)
            bins = sorted(floor.get(task, {}))
            axis.plot([2 ** (b + 0.5) for b in bins], [100 * floor[task][b] for b in bins], "k--", linewidth=1,
                      label="floor (from the prompts)")
            for name, values in models[task].items():
                if family[name] == group:
                    bins = sorted(values)
                    axis.plot([2 ** (b + 0.5) for b in bins], [100 * sum(values[b]) / len(values[b]) for b in bins], marker="o",
                              markersize=2.5, linewidth=1, label=name)
            axis.set_xscale("log", base=2)
            axis.set_ylim(-3, 103)
            axis.tick_params(labelsize=6)
            axis.set_title(f"{task}: {group}", fontsize=7)
            if i == len(tasks) - 1:
                axis.set_xlabel("asked needle's distance from the question (tokens)", fontsize=6)
            if j == 0:
                axis.set_ylabel(f"{METRICS[metric]} (%)", fontsize=6)
            if i == 0:
                axis.legend(fontsize=5, loc="lower left")
    figure.suptitle(f"Retrieval by distance: mean over seeds; dotted, ALiBi's head reaches 1/m ({HEADS} heads: "
                    f"{', '.join(f'{r:g}' for r in reaches)} tokens); solid, L = {train_length}", fontsize=7)
    path = os.path.join(out, f"retrieval_distance{suffix}.png")
    with written_whole(path) as partial:
        figure.savefig(partial, format="png", dpi=120)
    plt.close(figure)


def context_figure(context, out, train_length, family):
    """OUT/perplexity_by_context.png: by_context's perplexity against the tokens of context (mean over
    seeds), one panel per family of models, ALiBi's head reaches dotted, L solid."""
    from fairseq_alibi.slopes import alibi_slopes
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.results import pyplot

    families = [group for group in FAMILIES if group in {family[n] for n in context}]
    plt = pyplot()
    figure, axes = plt.subplots(1, len(families), figsize=(3.2 * len(families), 2.8), squeeze=False, sharey=True,
                                layout="constrained")
    reaches = [1 / m for m in alibi_slopes(HEADS)]
    for axis, group in zip(axes[0], families):
        mark_the_field(axis, reaches, train_length)
        for name, values in context.items():
            if family[name] == group:
                bins = sorted(b for b in values if b >= 0)
                axis.plot([2 ** (b + 0.5) for b in bins], [sum(values[b]) / len(values[b]) for b in bins], marker="o",
                          markersize=2.5, linewidth=1, label=name)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.tick_params(labelsize=6)
        axis.set_title(group, fontsize=7)
        axis.set_xlabel("tokens of context (position in the window)", fontsize=6)
        axis.legend(fontsize=5)
    axes[0][0].set_ylabel("validation perplexity", fontsize=6)
    figure.suptitle(f"Perplexity by tokens of context: mean over seeds; dotted, ALiBi's head reaches 1/m; solid, "
                    f"L = {train_length}", fontsize=7)
    with written_whole(os.path.join(out, "perplexity_by_context.png")) as partial:
        figure.savefig(partial, format="png", dpi=120)
    plt.close(figure)


def heatmaps(scored, out, metric, suffix):
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.results import method_name, pyplot

    plt = pyplot()

    for task in TASKS:
        rows = [r for r in scored if r["task"] == task]
        names = list(dict.fromkeys(map(method_name, rows)))
        if not names:
            continue
        lengths, depths = sorted({r["length"] for r in rows}), sorted({r["depth"] for r in rows})
        columns = min(len(names), 5)  # ten models and scalings in two rows, not one strip
        rows_of_panels = -(-len(names) // columns)
        figure, axes = plt.subplots(rows_of_panels, columns, figsize=(2.6 * columns, 2.8 * rows_of_panels),
                                    squeeze=False, layout="constrained")
        for axis in axes.flat[len(names):]:
            axis.set_axis_off()
        for axis, name in zip(axes.flat, names):
            grid = [[0.0] * len(lengths) for _ in depths]
            for i, depth in enumerate(depths):
                for j, length in enumerate(lengths):
                    values = [r[metric] for r in rows if r["depth"] == depth and r["length"] == length and
                              method_name(r) == name]
                    grid[i][j] = sum(values) / len(values) if values else float("nan")
            axis.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
            axis.set_xticks(range(len(lengths)), [str(x) for x in lengths], fontsize=6)
            axis.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths], fontsize=6)
            axis.set_title(f"{name}: {METRICS[metric]}", fontsize=7)
            axis.set_xlabel("tokens", fontsize=6)
        figure.colorbar(axes.flat[0].images[0], ax=axes, shrink=0.6).set_label("accuracy", fontsize=7)
        for row in axes:
            row[0].set_ylabel("depth", fontsize=6)
        path = os.path.join(out, f"retrieval_{task}{suffix}.png")
        with written_whole(path) as partial:
            figure.savefig(partial, format="png", dpi=120)
        plt.close(figure)
