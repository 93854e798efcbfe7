"""Where a grid's independent runs go, and the one way every trained experiment runs a grid.

``executor`` chooses and sizes the backend and runs the tasks (``tasks``: what every backend
shares; ``local``, ``ray_cluster``, ``slurm``: one module per backend); ``runner`` is the grid
runner (cached results first, the rest to the executor longest first, rows in order);
``session`` holds a chapter's grids for its whole execution; ``cache`` reads a cached result.
"""

from .executor import parse_workers, plan, run_tasks
from .runner import CachedRuns, run_cached_grid
from .session import GridSession
from .tasks import GridError, Plan, Task, TaskFailure

__all__ = ["CachedRuns", "GridError", "GridSession", "Plan", "Task", "TaskFailure",
           "parse_workers", "plan", "run_cached_grid", "run_tasks"]
