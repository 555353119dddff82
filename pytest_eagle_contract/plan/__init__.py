"""Which families run and how: ``registry`` lists every check family (the sharpness family
included), ``planner`` turns a contract and the options into units and runs them with the
resources they share (``Runner``)."""
