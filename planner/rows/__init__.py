"""Row-centric (LR-CNN) planning for convolution stacks: compute CNNs row band by row band.

A convolution's output row reads only a few input rows, so a chain of row-wise ops can run one
band of rows at a time through every layer, forward and backward, and most of its feature maps
never exist whole (Wang et al., "LR-CNN", arXiv 2401.11471). Modules:

* :mod:`planner.rows.layers` -- the layer table of a zoo graph: row geometry of each op, and which
  ops stop row-wise computation (global pooling, flatten, fully connected, attention -- the
  module docstring says how each is handled, and how batch norm runs inside regions, exact);
* :mod:`planner.rows.row_program` -- the analysis as vertex programs on the engine (row regions;
  backward propagation of every band's row ranges with halo growth);
* :mod:`planner.rows.plan` -- row plans (``overlap`` = OverL, ``share`` = 2PS, ``auto``), FLOPs
  and halo overhead, the predicted peak;
* :mod:`planner.rows.walk` -- the step list shared by the prediction and the executor
  (``planner.execute.rows_exec``);
* :mod:`planner.rows.with_dp` -- rows + recomputation: the DP's schedules and a greedy search on
  the exact walk drop what a row plan keeps whole.
"""
