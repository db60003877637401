# zerocalc web app: docker build -t zerocalc . && docker run -p 8501:8501 zerocalc
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt

COPY .streamlit/ .streamlit/
COPY zerocalc/ zerocalc/
COPY ui/ ui/
COPY app.py serve.py ./
# The probe script the Calibrate view offers for download (not imported by the app).
COPY tools/zerocalc_probe.py tools/
# The pages "How to read it" shows, and the validation ledger whose summary it states.
COPY docs/*.md docs/validation.json docs/

# A numeric, unprivileged user: no root in the running container.
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin zerocalc
USER 10001

EXPOSE 8501
# The slim image has no curl: probe with Python. script-health-check answers 503 when app.py itself fails.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8501/_stcore/script-health-check', timeout=4).status == 200 else 1)"]

# serve.py: app.py behind the headers a public page needs (frame-ancestors, nosniff, referrer policy).
ENTRYPOINT ["streamlit", "run", "serve.py", "--server.address=0.0.0.0", "--server.port=8501", \
            "--server.scriptHealthCheckEnabled=true"]
