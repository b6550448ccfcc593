"""Number each unnumbered page's equations, figures and exercises from 1.

Sphinx numbers the figures, equations and exercises of a page without section numbers (the
appendices, whose part of ``_toc.yml`` is unnumbered) with one counter shared by all such pages, in
the order of the table of contents: the performance appendix's equations were (1)-(2) and the
distributed appendix's went on at (3). JupyterLab numbers each notebook's equations from 1. This
restarts the count on every unnumbered page, so the book and the notebook show the same numbers.
Pages with section numbers (the chapters) keep Sphinx's numbers ("Figure 6.2", "(6.2)").
"""

from __future__ import annotations


def renumber(toc_fignumbers: dict, toc_secnumbers: dict) -> list[str]:
    """Restart the numbers of each page without section numbers at 1, per kind, in their order.

    ``toc_fignumbers`` maps page -> kind -> node id -> number tuple, ``toc_secnumbers`` page ->
    anchor -> section number. Changes ``toc_fignumbers`` in place; returns the pages it changed.
    """
    changed = []
    for docname, kinds in toc_fignumbers.items():
        if any(toc_secnumbers.get(docname, {}).values()):
            continue
        for numbers in kinds.values():
            ordered = sorted(numbers, key=lambda node_id: numbers[node_id])
            for count, node_id in enumerate(ordered, start=1):
                if numbers[node_id] != (count,):
                    numbers[node_id] = (count,)
                    if docname not in changed:
                        changed.append(docname)
    return changed


def _renumber(app, env) -> list[str]:
    return renumber(env.toc_fignumbers, env.toc_secnumbers)


def setup(app):
    # after the toctree collector (priority 500), which assigns the shared count
    app.connect("env-get-updated", _renumber, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
