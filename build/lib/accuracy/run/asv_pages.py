"""asv plugin: a plain `asv publish` keeps opbench's pages offline and draws every implementation.

`asv publish` empties the HTML directory and copies asv's own pages, which load their scripts
from CDNs and hide all but 8 curves. asv.conf.json names this module in "plugins"
(".accuracy.run.asv_pages": asv imports a name with a leading dot from the import path); every
subclass of asv's OutputPublisher runs at the end of a publish, so this one re-applies
`finish_pages` whoever ran the publish: `opbench run` or a user typing `asv publish`.
"""

from __future__ import annotations

import math
from pathlib import Path

from asv.console import log
from asv.publishing import OutputPublisher

from accuracy.run.offline_pages import finish_pages


class OpbenchPages(OutputPublisher):
    """Not a page of its own (asv's pages list is metadata only): a last step of every publish."""

    name = "opbench-pages"
    button_label = "opbench pages"
    description = "asv's pages without the internet, every implementation drawn (opbench)"
    order = math.inf  # after asv's own publishers

    @classmethod
    def publish(cls, conf, repo, benchmarks, graphs, revisions) -> None:
        for line in finish_pages(Path(conf.html_dir)):
            log.warning(f"opbench: {line}")
