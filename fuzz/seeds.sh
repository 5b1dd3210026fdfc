#!/usr/bin/env bash
# fuzz/seeds.sh DIR — writes the seed corpus of fuzz/http_parser_fuzz.cpp into DIR (make
# fuzz passes build/fuzz/corpus): requests like those the parser's tests and httpd see,
# one file each, so libFuzzer starts from valid heads, pipelines, bodies and each error.
set -euo pipefail
d=${1:?corpus dir}
mkdir -p "$d"
seed() { printf "$2" >"$d/$1"; }
seed get          'GET / HTTP/1.1\r\nHost: x\r\n\r\n'
seed curl         'GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: curl/7.81.0\r\nAccept: */*\r\n\r\n'
seed pipelined    'GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
seed post         'POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: x\r\n\r\n'
seed http10       'GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n'
seed bare-lf      '\r\n\nGET / HTTP/1.1\nHost: x\nContent-Length: 02\ncontent-length: 2\n\nab'
seed expect       'PUT /u HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc'
seed chunked      'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n'
seed too-big      'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1048577\r\n\r\n'
seed bad-colon    'GET / HTTP/1.1\r\nHost : x\r\n\r\n'
seed bad-version  'GET / HTTP/1.2\r\nHost: x\r\n\r\nGET / HTTP/2.0\r\n\r\n'
seed two-lengths  'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab'
{ printf 'GET / HTTP/1.1\r\nHost: x\r\nX-Fill: '; head -c 8155 /dev/zero | tr '\0' a
  printf '\r\n\r\n'; } >"$d/at-431-bound"
