"""Every rule that picks, checks or qualifies a winner: constraints and the best, cross-validation, routing, the
ladder, noise and queries needed, significance, the verdict and the locked holdout. The report renders each in
the report/ module of the same name."""
