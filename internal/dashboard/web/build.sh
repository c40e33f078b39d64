#!/bin/sh
# Builds the dashboard bundle into ../dist (committed, embedded with go:embed).
# Run from anywhere: sh internal/dashboard/web/build.sh, or go generate ./internal/dashboard.
# Install scripts are not run: esbuild finds its platform binary without them.
set -eu
cd "$(dirname "$0")"
npm ci --ignore-scripts --no-audit --no-fund
mkdir -p ../dist
rm -f ../dist/*
./node_modules/.bin/esbuild src/main.js \
  --bundle --format=esm --minify --target=es2020 \
  --legal-comments=eof --charset=utf8 \
  --outfile=../dist/app.js
cp src/index.html ../dist/index.html
