# zerocalc web app: docker build -t zerocalc . && docker run --rm -p 8501:8501 zerocalc
# The base is a build argument so that a machine with no registry can build on a stand-in made from Debian
# packages (.ci/base-image.sh does, for CI); everyone else gets the official image.
ARG BASE_IMAGE=python:3.11-slim

# The files the page runs and reads, gathered in an empty stage and copied into the image in one step below (on
# some storage drivers, vfs among them, every step after the packages' layer copies that layer whole).
FROM scratch AS files
# The label lets a builder without BuildKit find this stage's leftover images (tests/e2e/container.py removes them).
LABEL zerocalc.stage=files
COPY .streamlit/config.toml /app/.streamlit/
COPY zerocalc/ /app/zerocalc/
COPY ui/ /app/ui/
COPY app.py serve.py /app/
# The probe script the Calibrate view offers for download (not imported by the app).
COPY tools/zerocalc_probe.py /app/tools/
# The pages "How to read it" shows, and the validation ledger whose summary it states.
COPY docs/*.md docs/validation.json /app/docs/

FROM ${BASE_IMAGE}
# STREAMLIT_SERVER_ALLOWED_HOSTS: the Host names the page's WebSocket accepts (server.allowedHosts, against DNS
# rebinding), space-separated. Set it to the names visitors type: -e STREAMLIT_SERVER_ALLOWED_HOSTS=calc.example.com
# STREAMLIT_LOGGER_HIDE_WELCOME_MESSAGE: on 0.0.0.0 the welcome message looks up the host's public address at
# checkip.amazonaws.com on every start; a server has no use for it.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    STREAMLIT_SERVER_ALLOWED_HOSTS="localhost 127.0.0.1 ::1" \
    STREAMLIT_LOGGER_HIDE_WELCOME_MESSAGE=true
WORKDIR /app
EXPOSE 8501
# The slim image has no curl: probe with Python. script-health-check answers 503 when app.py itself fails. The
# path follows STREAMLIT_SERVER_BASE_URL_PATH when the page is served under a path.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os,sys,urllib.request as u; p=os.environ.get('STREAMLIT_SERVER_BASE_URL_PATH','').strip('/'); sys.exit(0 if u.urlopen('http://127.0.0.1:8501/'+(p+'/' if p else '')+'_stcore/script-health-check', timeout=4).status == 200 else 1)"]
# serve.py: app.py behind the headers a public page needs (frame-ancestors, nosniff, referrer policy).
ENTRYPOINT ["streamlit", "run", "serve.py", "--server.address=0.0.0.0", "--server.port=8501", \
            "--server.scriptHealthCheckEnabled=true"]
# A numeric, unprivileged user (USER below): no root in the running container; the files stay root's.
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin zerocalc

COPY requirements.txt .
# Byte-code is compiled here (the unprivileged user cannot write it at run time); the packages' own test suites
# are never imported by the page and go (pandas', numpy's and pyarrow's: about 70 MB).
RUN pip install --no-cache-dir -r requirements.txt \
    && python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > /tmp/site \
    && find "$(cat /tmp/site)" -depth -type d -name tests -path '*/site-packages/*/tests' -exec rm -rf {} + \
    && rm /tmp/site

COPY --from=files /app/ /app/
USER 10001
