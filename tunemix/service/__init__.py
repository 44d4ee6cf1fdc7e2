"""The tunemix scoring service: FastAPI routers over ``tunemix.core.scoring`` and ``tunemix.core.evaluation``.

Layout: ``settings`` (one pydantic-settings ``Settings``), ``registry`` (loaded models, atomic
reloads), ``schemas`` (request/response models, the OpenAPI contract), ``parsing`` (request
bodies to the project's array layout, with errors that name the query and field),
``observability`` (Prometheus metrics), ``routers/`` (one router per resource) and ``main``
(the application factory). Run it with ``python -m tunemix.service`` or ``uvicorn tunemix.service.main:app``.
"""
