"""The PDF edition (``jupyter-book build . --builder pdflatex``): what the LaTeX build changes.

- **Hints and solutions at the end of each chapter.** On a web page they are folded until a reader
  opens them; LaTeX has no fold (it ignores the ``dropdown`` class and the ``hide-*`` tags), so the
  PDF would print every hint and solution right under its exercise. Here each chapter's hints and
  solutions move, in their order, into a last section "Hints and solutions" of that chapter; each
  hint's title names its exercise ("Hint 1 to Exercise 6.8"), each solution's already does.
- **Exercises numbered as on the web**, per chapter (Exercise 6.8): sphinx-jupyterbook-latex numbers
  them by section (6.11.8) once a book has parts, which the web pages never show.

Only the LaTeX builder is touched; the HTML book is built as before.
"""

from __future__ import annotations

from docutils import nodes
from docutils.nodes import make_id
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

SECTION_TITLE = "Hints and solutions"
INTRO = ("The hints and solutions of this chapter's exercises, in order. On the web and in the "
         "notebooks they are folded under each exercise.")


def _is_exercise(node) -> bool:
    from sphinx_exercise.nodes import exercise_enumerable_node, exercise_node

    return isinstance(node, exercise_node | exercise_enumerable_node)


def _is_solution(node) -> bool:
    from sphinx_exercise.nodes import solution_node

    return isinstance(node, solution_node)


def _is_hint(node) -> bool:
    if not isinstance(node, nodes.admonition) or "dropdown" not in node.get("classes", []):
        return False
    title = next(iter(node.findall(nodes.title)), None)
    return title is not None and title.astext().startswith("Hint")


class HintsAndSolutionsAtTheEnd(SphinxPostTransform):
    """Move every hint and solution of a chapter into a last section of that chapter."""

    builders = ("latex",)
    default_priority = 900  # after sphinx-exercise has titled the solutions (priority 21)

    def _number(self, exercise) -> str:
        ids = exercise.get("ids") or [""]
        numbers = self.env.toc_fignumbers.get(exercise.get("docname", ""), {}).get("exercise", {})
        return ".".join(map(str, numbers.get(ids[0], ())))

    def run(self, **kwargs) -> None:
        for chapter in list(self.document.findall(addnodes.start_of_file)):
            if chapter["docname"] not in self.env.all_docs:
                continue  # a part ("Chapters", "Appendix") that sphinx-jupyterbook-latex wraps round pages
            top = next((c for c in chapter.children if isinstance(c, nodes.section)), None)
            if top is None:
                continue
            moved, exercise = [], None
            for node in list(top.findall(lambda n: _is_exercise(n) or _is_solution(n) or _is_hint(n))):
                if _is_exercise(node):
                    exercise = node
                    continue
                if any(node is m or node in m.findall() for m in moved):
                    continue  # inside a solution that moves already
                if _is_hint(node) and exercise is not None:
                    title = next(iter(node.findall(nodes.title)))
                    title += nodes.Text(f" to Exercise {self._number(exercise)}".rstrip())
                moved.append(node)
            if not moved:
                continue
            for node in moved:
                node.parent.remove(node)
            section = nodes.section(ids=[make_id(f"{chapter['docname']}-hints-and-solutions")])
            section += nodes.title("", SECTION_TITLE)
            section += nodes.paragraph("", INTRO)
            section.extend(moved)
            top += section


def _number_per_chapter(app, env) -> list[str]:
    """Exercise numbers (chapter, section, n) become (chapter, n), in the chapter's order."""
    if app.builder.format != "latex":
        return []
    for numbers in env.toc_fignumbers.values():
        exercises = numbers.get("exercise", {})
        if all(len(n) > 2 for n in exercises.values()):
            for k, (key, n) in enumerate(sorted(exercises.items(), key=lambda item: item[1]), 1):
                exercises[key] = (n[0], k)
    return []


def setup(app):
    # after Sphinx numbered figures and exercises by section (sphinx-jupyterbook-latex sets
    # numfig_secnum_depth to 2 for books with parts, so that figures and equations count per chapter)
    app.connect("env-get-updated", _number_per_chapter, priority=900)
    app.add_post_transform(HintsAndSolutionsAtTheEnd)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
