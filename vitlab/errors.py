"""The one exception type a user can cause. Messages name the input and say what to do (STYLE.md #9)."""


class VitlabError(Exception):
    """An error caused by the user's input (model spec, data, checkpoint, options).

    The CLI prints it on one line and exits non-zero; the app shows it in place.
    """
