"""The one exception type a user can cause. Messages name the input and its shape and say what to do."""


class VitlabError(Exception):
    """An error caused by the user's input (model spec, data, checkpoint, options).

    The CLI prints it on one line and exits non-zero; the app shows it in place.
    """
