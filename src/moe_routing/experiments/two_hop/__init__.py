"""Two-hop knowledge in trained MoEs (ours): one- and two-layer models trained on single-hop
facts and their compositions, held-out compositions, routing per layer.

``config`` — a run's configuration (nesting the model's shape and the schedule) and the grid;
``measure`` — the dataset, its split, router targets and the measurements; ``runs`` — a run,
its cache, the grid and the chapter's tables.
"""

from .config import (DEFAULT_TEMPLATES, WORD_DISJOINT_TEMPLATES, TwoHopConfig, TwoHopData,
                     two_hop_grid)
from .measure import TwoHopSplit, shared_hop_words, two_hop_dataset, two_hop_split
from .runs import (held_out_differences, load_two_hop, run_two_hop, run_two_hop_grid,
                   two_hop_cells, two_hop_convergence, two_hop_frame)

__all__ = ["DEFAULT_TEMPLATES", "TwoHopConfig", "TwoHopData", "TwoHopSplit",
           "WORD_DISJOINT_TEMPLATES", "held_out_differences", "load_two_hop", "run_two_hop",
           "run_two_hop_grid", "shared_hop_words", "two_hop_cells", "two_hop_convergence",
           "two_hop_dataset", "two_hop_frame", "two_hop_grid", "two_hop_split"]
