"""The attention modules' input errors, typed as torch.nn's so that code written for torch catches them.

torch.nn.MultiheadAttention asserts on the rank of its inputs and masks, their dtypes and the
embedding size (AssertionError), and refuses sizes that do not fit together, and the is_causal
hint without a mask, or an unknown activation name, with a RuntimeError. attnkit's errors name the
shapes, and each is also a ValueError, the project's type for a bad argument:

    except AssertionError   (torch's callers)  catches ShapeError
    except RuntimeError     (torch's callers)  catches InputError
    except ValueError       (attnkit's callers) catches both
"""

from __future__ import annotations


class ShapeError(ValueError, AssertionError):
    """An input or mask of the wrong rank, dtype or size where torch.nn asserts."""


class InputError(ValueError, RuntimeError):
    """Inputs torch.nn refuses with a RuntimeError: an attn_mask of the wrong size, batch sizes or
    features that do not fit, the is_causal hint without a mask, an activation name other than relu and gelu."""
