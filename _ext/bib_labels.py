"""Bibliography labels in the same author-year form as the citations in the text.

The text cites ``{cite:p}`harris1954distributional``` as "[Harris, 1954]"; with pybtex's default
labels the bibliography would list that work as "[Har54]". This style labels every entry the way
the citation reads: "Harris, 1954", "Krotov and Hopfield, 2016", "Cho et al., 2014", with a, b, ...
after the year when two works would share a label. Select it with ``bibtex_default_style:
authoryear``.
"""

from __future__ import annotations

from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle


def _surname(person) -> str:
    parts = person.rich_prelast_names + person.rich_last_names
    return " ".join(part.render_as("text") for part in parts)


def _label(entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_surname(p) for p in people]
    if not names:  # an anonymous work goes by its title, as written (no BibTeX braces)
        who = Text.from_latex(entry.fields.get("title", entry.key)).render_as("text")
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [_label(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:
                seen[label] += 1
                label = f"{label}{'abcdefghijklmnopqrstuvwxyz'[seen[label] - 1]}"
            yield label


class AuthorYearStyle(UnsrtStyle):
    default_label_style = AuthorYearLabels
    default_sorting_style = "author_year_title"


def setup(app):
    register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
