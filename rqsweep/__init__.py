"""rqsweep: measure and tune SOAT's hybrid knowledge-search ranking knobs."""

__version__ = "0.1.0"
