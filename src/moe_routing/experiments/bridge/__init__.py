"""Paper B's quantities on paper A's trained routers (ours).

``margins`` — top-two margins, boundary mass and its fit, the temperature grid that resolves
them; ``soft_hard`` — the soft mixture at temperature τ against hard routing, and B's bound;
``layers`` — the trained model's layer parts both read; ``temperature`` — paper A's model
trained from the symmetric start at several router temperatures, its growth fits across τ in
``temperature_fits``.
"""

from .margins import (RouterBoundaryMass, RouterMargins, boundary_mass_of_router,
                      margin_tail_constant, power_law_check, resolving_taus, router_margins)
from .soft_hard import BoundCheck, SoftHard, bound_check, soft_vs_hard
from .temperature import TemperatureSetup, temperature_sweep
from .temperature_fits import rate_scaling, step_scaling

__all__ = ["BoundCheck", "RouterBoundaryMass", "RouterMargins", "SoftHard", "TemperatureSetup",
           "bound_check", "boundary_mass_of_router", "margin_tail_constant", "power_law_check",
           "rate_scaling", "resolving_taus", "router_margins", "soft_vs_hard", "step_scaling",
           "temperature_sweep"]
