"""What every layer shares and nothing else: user-facing errors (:mod:`.errors`), progress
reporting (:mod:`.progress`), safe output files (:mod:`.fileio`) and byte formatting
(:mod:`.formatting`).

It sits below the engine and the planner (tests/test_layering.py: it imports nothing of the
project outside itself), so the planner's errors and progress do not come from the engine's
package, and the engine is not the planner's utility library.
"""
