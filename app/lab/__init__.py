"""UI glue shared by the pages, in four parts by what they do: ``state`` (the settings, plain values that survive page
switches), ``runs`` (models, sources, the store, the warm start, errors in place, ``compute`` and saved results),
``show`` (a page's lead, charts, exports, captions, clicks) and ``pickers`` (the sidebar). No numerics here (a page is
widgets, one engine call, charts): every number on screen comes from `vitlab`. Pages use ``import lab`` and the names
below; a test that patches module state patches the part that owns it (``lab.runs._warm_thread``).

Widget values are copied into plain session-state keys (``lab.*``) on every run, because Streamlit deletes a
keyed widget's state after a run in which it is not drawn (Streamlit 1.67); pages read only :func:`settings`.
"""

from . import links, pickers, runs, show, state  # noqa: F401 - the parts (pages call lab.links.box)
from .pickers import (  # noqa: F401
    CLOCK,
    _describe_choice,
    _is_checkpoint,
    model_choices,
    model_picker,
    model_slot,
    page,
    sidebar,
    source_picker,
    status_ui,
    upload_problems_ui,
    zoo_specs,
)
from .runs import (  # noqa: F401
    PERSIST_ENV,
    WARM_MODULES,
    WARMUP_ENV,
    _cancel,
    _dataset,
    _disk_key,
    _load,
    _loaded_registry,
    _memo,
    _note,
    _remember,
    _run_state,
    _unexpected,
    _warm,
    _warm_lock,
    _warm_thread,
    begin_run,
    compute,
    download_weights,
    guard,
    model,
    models,
    named_source,
    persisting,
    source,
    store,
    warm_up,
    weights_status,
)
from .show import (  # noqa: F401
    _LINE_START,
    _MARKDOWN,
    MIME,
    ORIGINS,
    OURS_LEAD,
    PAPER_LEAD,
    answer,
    chart,
    clickable,
    clicked,
    export,
    export_image,
    finding,
    follow_click,
    image,
    image_name,
    md_plain,
    run_caption,
)
from .state import (  # noqa: F401
    CHECKPOINT,
    DEFAULTS,
    DEVICES,
    ENV_INTS,
    FOLDER,
    MEMO_SIZE,
    OTHER,
    SOURCES,
    TOUR_SETTINGS,
    UPLOADS,
    VIEWS,
    Settings,
    _plain,
    _seed,
    env_settings,
    set_models,
    settings,
)
