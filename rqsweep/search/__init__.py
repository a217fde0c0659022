"""Which settings to evaluate: the search space, the grid and optimiser strategies, where a study lives, and the
protocol of a study shared by machines."""
