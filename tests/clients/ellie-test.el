;;; ellie-test.el --- ellie against the real olliesrv  -*- lexical-binding: t; -*-

;; Each test starts its own world: the fake provider with a script, a real olliesrv with a
;; private config root, data root and socket, the built tools under Landlock. ellie runs as a
;; person uses it: keys typed into its buffers with `execute-kbd-macro'.
;;   emacs --batch -Q -L data/elisp -l tests/clients/ellie-test.el -f ert-run-tests-batch-and-exit
;; with OLLIE_BUILD_DIR and OLLIE_SOURCE_DIR set.

;;; Code:

(require 'ert)
(require 'json)
(require 'ellie)

(defvar ellie-test-build (or (getenv "OLLIE_BUILD_DIR") (error "OLLIE_BUILD_DIR is not set")))
(defvar ellie-test-source (or (getenv "OLLIE_SOURCE_DIR") (error "OLLIE_SOURCE_DIR is not set")))

(defun ellie-test-until (pred &optional seconds)
  "Process output until PRED holds or SECONDS (default 20) pass; PRED's last value."
  (let ((end (+ (float-time) (or seconds 20))) value)
    (while (and (not (setq value (funcall pred))) (< (float-time) end))
      (accept-process-output nil 0.05))
    value))

(defun ellie-test-contains (buffer text)
  (with-current-buffer buffer
    (save-excursion (goto-char (point-min)) (search-forward text nil t))))

(defmacro ellie-test-with-world (responses &rest body)
  "Run BODY against a fresh olliesrv whose model answers with RESPONSES (fake provider JSON).
In BODY, `root' is the world's directory and `project' the session's working directory;
`(funcall start-olliesrv)' starts olliesrv again (after BODY killed it)."
  (declare (indent 1))
  `(let* ((root (make-temp-file "ellie-test-" t))
          (project (expand-file-name "project" root))
          (config (expand-file-name "config/ollie" root))
          (script (expand-file-name "script.json" root))
          (procs nil)
          (start-olliesrv nil)
          (process-environment (copy-sequence process-environment))
          (exec-path (cons (expand-file-name "bin" ellie-test-build) exec-path))
          (ellie-address (concat "unix!" root "/ns/ollie")))
     (unwind-protect
         (progn
           (dolist (d (list project config (expand-file-name "data" root)))
             (make-directory d t))
           (dolist (d '("ns" "run"))
             (make-directory (expand-file-name d root))
             (set-file-modes (expand-file-name d root) #o700))
           (copy-file (expand-file-name "data/sandbox.yaml" ellie-test-source) (expand-file-name "sandbox.yaml" config))
           (make-symbolic-link (expand-file-name "tools" ellie-test-build) (expand-file-name "tools" config))
           (make-symbolic-link (expand-file-name "data/agents" ellie-test-source) (expand-file-name "agents" config))
           (make-symbolic-link (expand-file-name "data/prompts" ellie-test-source) (expand-file-name "prompts" config))
           (with-temp-file script (insert (json-encode (list :responses (vconcat ,responses)))))
           (dolist (kv (list (concat "XDG_CONFIG_HOME=" root "/config") (concat "XDG_DATA_HOME=" root "/data")
                             (concat "XDG_RUNTIME_DIR=" root "/run") (concat "NAMESPACE=" root "/ns")
                             (concat "PATH=" ellie-test-build "/bin:" (getenv "PATH"))))
             (push kv process-environment))
           (let* ((fake-out (generate-new-buffer " *fake*"))
                  (fake (make-process :name "fake" :buffer fake-out :noquery t
                                      :command (list (expand-file-name "tests/fakeprovider/fakeprovider" ellie-test-build)
                                                     "--port" "0" "--script" script))))
             (push fake procs)
             (should (ellie-test-until (lambda () (ellie-test-contains fake-out "listening on")) 10))
             (let ((url (with-current-buffer fake-out
                          (goto-char (point-min))
                          (re-search-forward "listening on \\(http://[^ \n]+\\)")
                          (match-string 1))))
               (let ((env (append (list "OLLIE_BACKEND=openai" (concat "OLLIE_OPENAI_URL=" url "/v1")
                                        "OLLIE_OPENAI_KEY=sk-test" "OLLIE_MODEL=fake-model")
                                  process-environment)))
                 (setq start-olliesrv
                       (lambda ()
                         (let ((process-environment env))
                           (push (make-process :name "olliesrv" :buffer (generate-new-buffer " *olliesrv*") :noquery t
                                               :command (list (expand-file-name "bin/olliesrv" ellie-test-build) "-l" "info"))
                                 procs))))
                 (funcall start-olliesrv))))
           (should (ellie-test-until (lambda () (ignore-errors (ellie-read "session/idx") t)) 10))
           (let ((default-directory (file-name-as-directory project)))
             ,@body))
       (dolist (b (buffer-list))
         (when (string-prefix-p "*ellie" (buffer-name b)) (kill-buffer b)))
       (dolist (p (process-list))
         (when (string-prefix-p "ellie" (process-name p)) (delete-process p)))
       (dolist (p procs) (when (process-live-p p) (signal-process p 'SIGKILL)))
       (delete-directory root t))))

(defun ellie-test-type (buffer text &optional keys)
  "Type TEXT, then KEYS (a `kbd' string, default RET), in BUFFER, as a person would."
  (with-current-buffer buffer
    (goto-char (point-max))
    (execute-kbd-macro (vconcat text (kbd (or keys "RET"))))))

(defun ellie-test-state (session agent)
  (nth 2 (assoc agent (ellie--rows (ellie-read (format "session/%s/agent/idx" session))))))

(ert-deftest ellie-chat-streams-the-answer-to-a-typed-prompt ()
  (ellie-test-with-world (list '(:text "Hello from the fake model."))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (should chat)
      (should (equal (nth 2 (assoc "work" (ellie--rows (ellie-read "session/idx")))) project))
      (ellie-test-type chat "what is here?")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "Hello from the fake model."))))
      (should (ellie-test-contains chat "user: what is here?"))
      ;; the prompt line is empty again, below the chat
      (with-current-buffer chat
        (should (equal (buffer-substring-no-properties ellie--input (point-max)) "")))
      ;; /verb is the server's: the reply arrives in the chat
      (ellie-test-type chat "/model")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "fake-model"))))
      ;; C-c C-s shows the stats
      (with-current-buffer chat
        (should (string-match-p "^requests=1$" (ellie-stats)))))))

(ert-deftest ellie-stop-ends-a-running-turn ()
  (ellie-test-with-world (list '(:fault "hang"))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (ellie-test-type chat "take your time")
      (should (ellie-test-until (lambda () (equal (ellie-test-state "work" "main") "thinking"))))
      (ellie-test-type chat "" "C-c C-c")
      (should (ellie-test-until (lambda () (equal (ellie-test-state "work" "main") "idle")) 5)))))

(ert-deftest ellie-queues-through-the-fifo-with-a-prefix-argument ()
  (ellie-test-with-world (list '(:fault "hang"))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (ellie-test-type chat "first")
      (should (ellie-test-until (lambda () (equal (ellie-test-state "work" "main") "thinking"))))
      (ellie-test-type chat "later" "C-u RET")
      ;; the queued prompt is the fifo's head: reading it pops it
      (should (equal (string-trim (ellie-read "session/work/agent/main/fifo")) "later"))
      ;; a prompt for a busy agent waits in its queue, and ellie says so, as `o' does
      (let ((messages (with-current-buffer "*Messages*" (point-max))))
        (ellie-test-type chat "again")
        (should (with-current-buffer "*Messages*"
                  (save-excursion (goto-char messages)
                                  (search-forward "ellie: queued: the agent is thinking; it runs when the turn ends"
                                                  nil t))))))))

(ert-deftest ellie-bypass-requests-are-shown-and-approved ()
  (ellie-test-with-world
      (list '(:tool_calls [(:id "c1" :name "shell" :arguments (:cmd "echo outside > escaped.txt" :bypass t))])
            '(:text "It ran."))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (ellie-test-type chat "escape please")
      (should (or (ellie-test-until (lambda () (ellie-test-contains chat "[bypass ")))
                  (progn (message "chat:\n%s\nolliesrv:\n%s"
                                  (with-current-buffer chat (buffer-string))
                                  (with-current-buffer (process-buffer (car procs)) (buffer-string)))
                         nil)))
      (should (ellie-test-contains chat "echo outside > escaped.txt"))
      (cl-letf (((symbol-function 'read-char-choice)
                 (lambda (prompt _chars)
                   (should (string-match-p "echo outside > escaped.txt" prompt))
                   ?y)))
        (ellie-test-type chat "" "C-c C-b"))
      (should (ellie-test-until (lambda () (ellie-test-contains chat "It ran."))))
      (should (file-exists-p (expand-file-name "escaped.txt" project)))
      ;; the note says how it was decided, and no longer asks
      (should (ellie-test-until (lambda () (ellie-test-contains chat "echo outside > escaped.txt  (allowed)"))))
      (should-not (ellie-test-contains chat "C-c C-b to decide")))))

(ert-deftest ellie-a-refused-decision-does-not-stop-the-others ()
  ;; `allow always' of a multi-line command is refused (spec §6.9.2): said, and the next
  ;; request is still asked and decided.
  (ellie-test-with-world
      (list '(:tool_calls [(:id "c1" :name "shell" :arguments (:cmd "echo l1\necho l2" :bypass t))])
            '(:tool_calls [(:id "c2" :name "shell" :arguments (:cmd "echo two > second.txt" :bypass t))])
            '(:text "It ran."))
    (ellie "work" "main")
    (ellie-write "session/work/agent/new" "name=b2\n")
    (let ((chat (get-buffer "*ellie work/main*")) (asked 0))
      (ellie-test-type chat "escape please")
      (should (ellie-test-until (lambda () (= (length (ellie--pending "work")) 1))))
      (ellie-write "session/work/agent/b2/prompt" "you too\n")
      (should (ellie-test-until (lambda () (= (length (ellie--pending "work")) 2))))
      (cl-letf (((symbol-function 'read-char-choice)
                 (lambda (_prompt _chars) (if (= (cl-incf asked) 1) ?a ?y))))
        (with-current-buffer chat (ellie-bypass ellie--session-id)))
      (should (= asked 2))
      (should (ellie-test-until (lambda () (file-exists-p (expand-file-name "second.txt" project)))))
      (should (with-current-buffer "*Messages*"
                (save-excursion (goto-char (point-max))
                                (search-backward "ellie: 1 of 2 decided; refused: request " nil t)))))))

(ert-deftest ellie-a-request-pending-before-the-chat-opens-is-shown ()
  (ellie-test-with-world
      (list '(:tool_calls [(:id "c1" :name "shell" :arguments (:cmd "echo outside > early.txt" :bypass t))])
            '(:text "Done."))
    (ellie-rdwr "session/new" (format "name=work cwd=%s\n" (ellie--quote project)))
    (ellie-rdwr "session/work/agent/new" "name=main\n")
    (ellie-write "session/work/agent/main/prompt" "escape before anyone watches\n")
    (should (ellie-test-until (lambda () (ellie--pending "work"))))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (should (ellie-test-contains chat "[bypass "))
      (should (ellie-test-contains chat "echo outside > early.txt"))
      ;; a second chat of the session shows it too, and the first does not show it again
      (ellie "work" "other")
      (should (ellie-test-contains (get-buffer "*ellie work/other*") "[bypass "))
      (should (= (with-current-buffer chat (how-many "\\[bypass " (point-min) (point-max))) 1)))))

(ert-deftest ellie-names-are-quoted-and-a-refused-agent-leaves-no-session ()
  (ellie-test-with-world (list '(:text "hi"))
    (should (string-match-p "invalid name: my work"
                            (cadr (should-error (ellie "my work" "main") :type 'user-error))))
    (should (string-match-p "invalid name: bad agent"
                            (cadr (should-error (ellie "half" "bad agent") :type 'user-error))))
    (should-not (member "half" (ellie--sessions)))
    (should-not (ellie--sessions))))

(ert-deftest ellie-chat-comes-back-after-olliesrv-restarts ()
  (ellie-test-with-world (list '(:text "Before the restart.") '(:text "After the restart.")
                               '(:text "After the stop."))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (ellie-test-type chat "one")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "Before the restart."))))
      (signal-process (car procs) 'SIGKILL)
      (should (ellie-test-until (lambda () (ellie-test-contains chat "[chat lost:"))))
      (funcall start-olliesrv)
      ;; read again: the replay takes the place of the old text, the notice included
      (should (ellie-test-until (lambda () (not (ellie-test-contains chat "[chat lost:")))))
      (should (ellie-test-until (lambda () (ellie-test-contains chat "Before the restart."))))
      (ellie-test-type chat "two")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "After the restart."))))
      ;; a stop (systemctl's SIGTERM) ends the chat at end of file: lost too, not the agent's end
      (signal-process (car procs) 'SIGTERM)
      (should (ellie-test-until (lambda () (ellie-test-contains chat "[chat lost:"))))
      (should-not (ellie-test-contains chat "the agent is gone"))
      (should (ellie-test-until (lambda () (not (process-live-p (car procs))))))  ; its data directory's lock
      (funcall start-olliesrv)
      (should (ellie-test-until (lambda () (not (ellie-test-contains chat "[chat lost:")))))
      (ellie-test-type chat "three")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "After the stop.")))))))

(ert-deftest ellie-complete-shows-ghost-text-that-tab-accepts ()
  (ellie-test-with-world (list '(:text "a + b;") '(:text "a - b;"))
    (with-temp-buffer
      (switch-to-buffer (current-buffer))
      (insert "int add(int a, int b) { return  }")
      (goto-char (- (point-max) 2))
      (ellie-complete)
      (should (ellie-test-until (lambda () (overlayp ellie--ghost))))
      (should (equal (overlay-get ellie--ghost 'ellie-text) "a + b;"))
      (execute-kbd-macro (kbd "TAB"))
      (should (equal (buffer-string) "int add(int a, int b) { return a + b; }"))
      (should-not ellie--ghost)
      ;; any other key dismisses the offer and does its own work
      (ellie-complete)
      (should (ellie-test-until (lambda () (overlayp ellie--ghost))))
      (execute-kbd-macro (kbd "x"))
      (should-not ellie--ghost)
      (should (equal (buffer-string) "int add(int a, int b) { return a + b;x }")))))

;; The same default session as `o' in the same directory (o's `tr' works on bytes).
(ert-deftest ellie-default-session-is-the-one-o-makes ()
  (dolist (case '(("/tmp/café/" . "caf--") ("/tmp/日本/" . "o") ("/tmp/my work/" . "my-work")
                  ("/tmp/.hidden/" . "hidden") ("/tmp/new/" . "new-1")))
    (let ((default-directory (car case)))
      (should (equal (ellie--default-session) (cdr case))))))

;; Fontification moves `buffer-modified-tick' while the answer is on its way; only a change of
;; the text (or of point) drops it, and says so.
(ert-deftest ellie-complete-survives-fontification-and-says-when-it-drops ()
  (ellie-test-with-world (list '(:text "a + b;") '(:text "a - b;"))
    (with-temp-buffer
      (switch-to-buffer (current-buffer))
      (insert "int add(int a, int b) { return  }")
      (goto-char (- (point-max) 2))
      (ellie-complete)
      (put-text-property (point-min) (+ (point-min) 3) 'face 'bold)
      (should (ellie-test-until (lambda () (overlayp ellie--ghost))))
      (should (equal (overlay-get ellie--ghost 'ellie-text) "a + b;"))
      (execute-kbd-macro (kbd "x"))
      (let ((messages (with-current-buffer "*Messages*" (point-max))))
        (ellie-complete)
        (insert "y")
        (should (ellie-test-until (lambda () (with-current-buffer "*Messages*"
                                               (save-excursion (goto-char messages)
                                                               (search-forward "completion dropped" nil t))))))
        (should-not ellie--ghost)))))

;; An agent killed from the shell ends its chat; a prompt typed there then says the agent is
;; gone (not ollie-9p's walk error, which names ids), and the typed text stays, also when
;; M-x ellie makes the agent again in the same buffer.
(ert-deftest ellie-a-killed-agent-ends-its-chat-and-says-so-at-the-next-prompt ()
  (ellie-test-with-world (list '(:text "Hello."))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (ellie-test-type chat "one")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "Hello."))))
      (ellie-rdwr "session/work/agent/main/ctl" "kill")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "[chat ended: the agent is gone]"))))
      (let ((err (should-error (ellie-test-type chat "two") :type 'user-error)))
        (should (equal (cadr err) "ellie: the agent is gone (M-x ellie work main makes it again)")))
      (should (with-current-buffer chat
                (equal (buffer-substring-no-properties ellie--input (point-max)) "two")))
      (ellie "work" "main")
      (should (eq (get-buffer "*ellie work/main*") chat))
      (with-current-buffer chat
        (should (process-live-p ellie--stream))
        (should (equal (buffer-substring-no-properties ellie--input (point-max)) "two"))
        (should (= (point) (point-max)))))))

;; A chat buffer killed while olliesrv is away stops waiting for it: no probe a second after.
(ert-deftest ellie-a-chat-killed-while-olliesrv-is-away-stops-probing ()
  (ellie-test-with-world (list '(:text "Hello."))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")) (probes 0))
      (ellie-test-type chat "one")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "Hello."))))
      (signal-process (car procs) 'SIGKILL)
      (should (ellie-test-until (lambda () (ellie-test-contains chat "[chat lost:"))))
      (kill-buffer chat)
      (ellie-test-until (lambda () nil) 1.5)  ; a probe already started may end
      (let ((count (lambda (&rest _) (setq probes (1+ probes)))))
        (advice-add 'ellie--probe :before count)
        (unwind-protect (ellie-test-until (lambda () nil) 3)
          (advice-remove 'ellie--probe count)))
      (should (= probes 0)))))

(ert-deftest ellie-sessions-lists-agents-and-kills-after-confirmation ()
  (ellie-test-with-world (list '(:text "hi"))
    (ellie-rdwr "session/new" (format "name=alpha cwd=%s\n" (ellie--quote project)))
    (ellie-rdwr "session/alpha/agent/new" "name=main\n")
    (ellie-sessions)
    (ellie-sessions)  ; again: still one watcher
    (should (= (cl-count-if (lambda (p) (string-match-p "\\`ellie-sessions\\(<[0-9]+>\\)?\\'" (process-name p)))
                            (process-list))
               1))
    (with-current-buffer "*ellie sessions*"
      (should (ellie-test-until (lambda () (ellie-test-contains (current-buffer) "alpha"))))
      ;; a session made elsewhere appears through the event stream
      (ellie-rdwr "session/new" (format "name=beta cwd=%s\n" (ellie--quote project)))
      (should (ellie-test-until (lambda () (ellie-test-contains (current-buffer) "beta"))))
      (goto-char (point-min))
      (search-forward "alpha")
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (_prompt) t)))
        (execute-kbd-macro (kbd "k")))
      (should-not (member "alpha" (ellie--sessions))))))

;;;; An olliesrv that does not answer, renames, partial lines, another directory

(defconst ellie-test-mute-server "
import os, select, socket, sys
path = sys.argv[1]
if os.path.exists(path): os.unlink(path)
srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(64)
print('listening', flush=True)
held = []
while sys.stdin not in select.select([srv, sys.stdin], [], [])[0]:
    held.append(srv.accept()[0])
os.unlink(path)
"
  "A server that takes every connection and never answers; it ends when its stdin does.")

(defun ellie-test-seconds (fn)
  "How long FN took."
  (let ((start (float-time))) (funcall fn) (- (float-time) start)))

(defun ellie-test-longest-pause (seconds)
  "Process output for SECONDS; the longest time Emacs was held up (by a timer or a filter)."
  (let* ((end (+ (float-time) seconds)) (last (float-time)) (longest 0))
    (while (< (float-time) end)
      (accept-process-output nil 0.05)
      (setq longest (max longest (- (float-time) last)) last (float-time)))
    longest))

(ert-deftest ellie-stays-responsive-while-olliesrv-does-not-answer ()
  ;; Timers and process filters run with C-g inhibited: none of them may wait for olliesrv.
  (ellie-test-with-world (list '(:text "Back again."))
    (ellie-sessions)
    (ellie "work" "main")  ; last: keys go to the selected window's buffer
    (let* ((chat (get-buffer "*ellie work/main*"))
           (sid (string-trim (ellie-read "session/work/id")))
           (watch (buffer-local-value 'ellie--list-watch (get-buffer "*ellie sessions*")))
           (events (cl-find-if (lambda (p) (and (member "event" (process-command p)) (not (eq p watch))))
                               (process-list)))  ; the chats' watch: bypass requests
           (ellie-timeout 1))
      (should (ellie-test-until (lambda () (ellie-test-contains "*ellie sessions*" "main"))))
      (signal-process (car procs) 'SIGKILL)
      (should (ellie-test-until (lambda () (ellie-test-contains chat "[chat lost:"))))
      ;; the timer waiting for olliesrv meets one that takes the connection and never answers
      ;; (`timeout': an ellie that waits for it is held 10 s, not for good)
      (let ((mute (make-process :name "mute" :buffer (generate-new-buffer " *mute*") :noquery t
                                :connection-type 'pipe
                                :command (list "timeout" "10" "python3" "-c" ellie-test-mute-server
                                               (concat root "/ns/ollie")))))
        (push mute procs)
        (should (ellie-test-until (lambda () (ellie-test-contains (process-buffer mute) "listening")) 10))
        ;; the filters return at once: the bypass watch's, the session list's
        (should (< (ellie-test-seconds
                    (lambda () (funcall (process-filter events) events
                                        (format "bypass.%s.request 7 session/work/agent/main shell\n" sid))))
                   0.5))
        (should (< (ellie-test-seconds
                    (lambda () (funcall (process-filter watch) watch "session.x.new session/x\n")))
                   0.5))
        ;; and the timers: Emacs is never held up meanwhile
        (should (< (ellie-test-longest-pause 2.5) 0.5))
        ;; the request is shown, with the tool for the summary that could not be read
        (should (ellie-test-until
                 (lambda () (ellie-test-contains chat "[bypass 7] main wants to run shell outside the sandbox: shell"))
                 5))
        (delete-process mute))
      ;; olliesrv back: the chat comes back and answers
      (funcall start-olliesrv)
      (should (ellie-test-until (lambda () (not (ellie-test-contains chat "[chat lost:")))))
      (ellie-test-type chat "again")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "Back again.")))))))

(ert-deftest ellie-a-renamed-pair-keeps-working ()
  (ellie-test-with-world
      (list '(:text "Before the rename.")
            '(:tool_calls [(:id "c1" :name "shell" :arguments (:cmd "echo renamed > out.txt" :bypass t))])
            '(:text "It ran."))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (ellie-test-type chat "one")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "Before the rename."))))
      (ellie-write "session/work/name" "job\n")
      (ellie-write "session/job/agent/main/name" "lead\n")
      ;; the buffer takes the new names
      (should (ellie-test-until (lambda () (equal (buffer-name chat) "*ellie job/lead*")) 10))
      ;; prompts, stats and bypass requests still reach the agent: it is addressed by id
      (ellie-test-type chat "escape please")
      (should (ellie-test-until (lambda () (ellie-test-contains chat "[bypass "))))
      (should (ellie-test-contains chat "lead wants to run shell outside the sandbox: echo renamed > out.txt"))
      (cl-letf (((symbol-function 'read-char-choice) (lambda (_prompt _chars) ?y)))
        (ellie-test-type chat "" "C-c C-b"))
      (should (ellie-test-until (lambda () (ellie-test-contains chat "It ran."))))
      (with-current-buffer chat
        (should (string-match-p "^requests=3$" (ellie-stats))))
      ;; M-x ellie with the new names finds the same buffer
      (ellie "job" "lead")
      (should (eq (current-buffer) chat)))))

(ert-deftest ellie-the-prompt-starts-its-own-line ()
  (ellie-test-with-world (list '(:text "a slow answer, streamed in pieces" :chunk 4 :delay_ms 300))
    (ellie "work" "main")
    (let ((chat (get-buffer "*ellie work/main*")))
      (cl-flet ((prompt-at-bol () (with-current-buffer chat
                                    (save-excursion (goto-char (- ellie--input 2))
                                                    (and (bolp) (looking-at-p "> ")))))
                (partial () (with-current-buffer chat
                              (and (ellie-test-contains chat "a slow")
                                   (not (ellie-test-contains chat "in pieces"))))))
        (ellie-test-type chat "take your time")
        ;; an answer half streamed: its line is not ended, the prompt is below it all the same
        (should (ellie-test-until #'partial))
        (should (prompt-at-bol))
        (should (ellie-test-until (lambda () (ellie-test-contains chat "in pieces"))))
        (should (prompt-at-bol))
        ;; typing goes to the prompt line, not into the answer
        (with-current-buffer chat
          (goto-char (point-max))
          (insert "next")
          (should (equal (buffer-substring-no-properties ellie--input (point-max)) "next")))))))

(ert-deftest ellie-says-when-a-session-works-elsewhere ()
  (ellie-test-with-world (list '(:text "hi"))
    (let ((said nil))
      (cl-letf (((symbol-function 'message)
                 (lambda (format &rest args) (when format (push (apply #'format-message format args) said)))))
        ;; made here, opened again from here: nothing to say
        (ellie "here" "main")
        (ellie "here" "main")
        (should-not (cl-find-if (lambda (m) (string-match-p "works in" m)) said))
        ;; made elsewhere: said, and the chat opens all the same
        (ellie-rdwr "session/new" (format "name=there cwd=%s\n" (ellie--quote root)))
        (ellie "there" "main")
        (should (member (format "ellie: session there works in %s, not here" root) said))
        (should (get-buffer "*ellie there/main*"))
        ;; picked from the session list, which shows where it works: nothing to say
        (setq said nil)
        (ellie-sessions)
        (with-current-buffer "*ellie sessions*"
          (should (ellie-test-until (lambda () (ellie-test-contains (current-buffer) "there"))))
          (goto-char (point-min))
          (search-forward "there")
          (ellie-sessions-open))
        (should-not (cl-find-if (lambda (m) (string-match-p "works in" m)) said))))))

;;; ellie-test.el ends here
